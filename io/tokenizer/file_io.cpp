// Whole-file reads for the tokenizer code.
#include "io/tokenizer/file_io.h"

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

}  // namespace glm4::tok_io
