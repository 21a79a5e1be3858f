// The adapter-config targets: a valid adapter of one format (fuzz_fixtures.h) whose
// adapter_config.json is replaced by the input, then read as glm4 reads adapters (settings and
// tensors, checked against each other).
#pragma once
#include "fuzz/fuzz_fixtures.h"
#include "fuzz/fuzz_support.h"
#include "model/adapter/adapter_files.h"

namespace glm4::fuzz {

inline size_t elements(const Shape& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  return n;
}

inline int read_fuzzed_adapter(const std::string& format, const uint8_t* data, size_t size) {
  static const std::filesystem::path dir = [&] {
    auto d = scratch_dir("adapter_" + format);
    write_adapter_fixture(d, format);
    return d;
  }();
  write_bytes(dir / "adapter_config.json", data, size);
  return accept_rejection([&] {
    (void)read_adapter_info(dir);
    const AdapterFile a = read_adapter_file(dir, true);
    for (const auto& [name, m] : a.modules) {
      if (m.a.size() != elements(m.a_shape) || m.b.size() != elements(m.b_shape)) std::abort();
    }
  });
}

}  // namespace glm4::fuzz
