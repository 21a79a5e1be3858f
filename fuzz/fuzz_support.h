// What every fuzz target shares: a scratch directory of its own, writing the input to a file
// there, and the one rule of the harness: glm4::Error is how a parser rejects bad input, so it
// ends the run normally; anything else (another exception, a crash, a sanitizer report) is a
// finding.
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "base/check.h"

namespace glm4::fuzz {

// /tmp/glm4_fuzz_<pid>/<name>, created on first use and removed when the process exits.
inline std::filesystem::path scratch_dir(const std::string& name = "") {
  static const std::filesystem::path root = [] {
    auto p = std::filesystem::temp_directory_path() / ("glm4_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(p);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(
          std::filesystem::temp_directory_path() / ("glm4_fuzz_" + std::to_string(::getpid())), ec);
    });
    return p;
  }();
  auto p = name.empty() ? root : root / name;
  std::filesystem::create_directories(p);
  return p;
}

inline void write_bytes(const std::filesystem::path& file, const uint8_t* data, size_t size) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  if (!out) std::abort();  // the harness itself failed: not the parser's fault, but stop loudly
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `parse`; a glm4::Error is a normal rejection. Other exceptions escape to libFuzzer.
template <typename F>
int accept_rejection(F&& parse) {
  try {
    parse();
  } catch (const glm4::Error&) {
  }
  return 0;
}

}  // namespace glm4::fuzz
