#include "io/file/json_file.h"

#include <fstream>
#include <sstream>

#include "base/check.h"
#include "io/file/json_depth.h"

namespace glm4 {

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail(path.string(), ": cannot open: no such file");
  if (std::filesystem::is_directory(path, ec))
    fail(path.string(), ": is a directory, expected a JSON file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path.string(), ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail(path.string(), ": read error");
  const std::string text = ss.str();
  check_json_depth(text, path.string());
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.what() reads "[json.exception.parse_error.101] parse error at line L, column C: ..."
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    fail(path.string(), ": invalid JSON at byte ", e.byte, ": ", what);
  } catch (const nlohmann::json::exception& e) {
    // Not only parse_error: a number beyond double's range is out_of_range (found by
    // fuzz_safetensors_index).
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    fail(path.string(), ": invalid JSON: ", what);
  }
}

}  // namespace glm4
