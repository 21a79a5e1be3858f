// Whole-file reads and atomic writes for the tokenizer code.
#include "io/tokenizer/file_io.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

#include "base/check.h"

namespace glm4::tok_io {

std::string read_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  GLM4_CHECK(in, "cannot open ", file.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  GLM4_CHECK(!in.bad(), "error reading ", file.string());
  return ss.str();
}

void write_file_atomic(const std::filesystem::path& file, std::string_view data) {
  const std::filesystem::path tmp =
      file.parent_path() / (file.filename().string() + ".tmp." + std::to_string(::getpid()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    GLM4_CHECK(out, "cannot create ", tmp.string());
    out.write(data.data(), std::streamsize(data.size()));
    out.flush();
    if (!out) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      fail("error writing ", tmp.string());
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, file, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    fail("cannot rename ", tmp.string(), " to ", file.string(), ": ", ec.message());
  }
}

}  // namespace glm4::tok_io
