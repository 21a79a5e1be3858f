// Flag parsing shared by the subcommands.
#include "cli/cli_common.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "base/strings.h"
#include "io/file/json_line.h"

namespace glm4::cli {
namespace fs = std::filesystem;

namespace {
std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
}  // namespace

void print_json(const nlohmann::json& j) {
  std::printf("%s\n", json_line(j).c_str());
  std::fflush(stdout);
}

std::vector<int32_t> parse_token_list(const std::string& text, const std::string& flag,
                                      int64_t vocab) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string item =
        trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    int64_t v = -1;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    GLM4_CHECK(!item.empty() && ec == std::errc() && end == item.data() + item.size() && v >= 0 &&
                   v <= INT32_MAX,
               flag, ": \"", item, "\" is not a token id (expected a list like 1,2,3)");
    GLM4_CHECK(vocab <= 0 || v < vocab, flag, ": token id ", v, " is outside the vocabulary of ",
               vocab, " tokens");
    ids.push_back(int32_t(v));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return ids;
}

size_t parse_size(const std::string& text, const std::string& flag) {
  std::string s = trim(text);
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  std::string number = s.substr(0, i), unit = upper(trim(s.substr(i)));
  double value = 0;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  bool ok = !number.empty() && ec == std::errc() && end == number.data() + number.size();
  double mult = 0;
  if (unit.empty() || unit == "B")
    mult = 1;
  else if (unit == "KB")
    mult = 1e3;
  else if (unit == "MB")
    mult = 1e6;
  else if (unit == "GB")
    mult = 1e9;
  else if (unit == "TB")
    mult = 1e12;
  else if (unit == "KIB")
    mult = 1024.0;
  else if (unit == "MIB")
    mult = 1024.0 * 1024;
  else if (unit == "GIB")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "TIB")
    mult = 1024.0 * 1024 * 1024 * 1024;
  double bytes = value * mult;
  GLM4_CHECK(ok && mult > 0 && std::isfinite(bytes) && bytes < 9e18, flag, ": \"", text,
             "\" is not a size (examples: 2GB, 500MB, 1.5GiB, 0 for no limit)");
  return size_t(std::llround(bytes));
}

DType parse_dtype_flag(const std::string& text, const std::string& flag) {
  DType d;
  GLM4_CHECK(parse_dtype(text, &d), flag, ": \"", text,
             "\" is not a dtype (expected f32, bf16 or f16)");
  return d;
}

void check_output_file(const fs::path& path, const std::string& flag, bool force) {
  std::error_code ec;
  GLM4_CHECK(!fs::is_directory(path, ec), flag, " ", path.string(),
             ": is a directory, expected a file name");
  fs::path parent = path.parent_path();
  GLM4_CHECK(parent.empty() || fs::is_directory(parent, ec), flag, " ", path.string(),
             ": directory ", parent.string(), " does not exist");
  GLM4_CHECK(force || !fs::exists(path, ec), flag, " ", path.string(), ": the file exists (",
             fs::file_size(path, ec), " bytes); add --force to replace it, or choose another ",
             flag);
}

void check_model_dir(const fs::path& dir, const std::string& flag, bool need_config) {
  std::error_code ec;
  const char* what = "a model directory (config.json, weights, tokenizer)";
  GLM4_CHECK(!fs::exists(dir, ec) || fs::is_directory(dir, ec), flag, " ", dir.string(),
             ": is a file, expected ", what);
  if (!need_config) return;
  GLM4_CHECK(fs::exists(dir, ec), flag, " ", dir.string(), ": no such directory");
  GLM4_CHECK(fs::exists(dir / "config.json", ec), flag, " ", dir.string(),
             ": no config.json, expected ", what);
}

void check_input_file(const fs::path& path, const std::string& flag) {
  std::error_code ec;
  GLM4_CHECK(fs::exists(path, ec), flag, " ", path.string(), ": no such file");
  GLM4_CHECK(!fs::is_directory(path, ec), flag, " ", path.string(),
             ": is a directory, expected a file");
}

namespace {
// "adapter_model.safetensors, best/, checkpoint.h5 and 2 more": what a directory holds.
std::string listing(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    names.push_back(e.path().filename().string() + (e.is_directory() ? "/" : ""));
  std::sort(names.begin(), names.end());
  std::string out;
  const size_t shown = std::min<size_t>(names.size(), 4);
  for (size_t i = 0; i < shown; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > shown) out += str_cat(" and ", names.size() - shown, " more");
  return out;
}
}  // namespace

namespace {
// A directory to be created: its nearest existing ancestor must be a directory.
void check_creatable(const fs::path& dir, const std::string& flag) {
  std::error_code ec;
  for (fs::path p = dir.parent_path(); !p.empty(); p = p.parent_path()) {
    if (fs::exists(p, ec)) {
      GLM4_CHECK(fs::is_directory(p, ec), flag, " ", dir.string(),
                 ": cannot create directories: ", p.string(), " is a file, not a directory");
      return;
    }
    if (p == p.parent_path()) return;  // the root
  }
}
}  // namespace

void check_output_dir(const fs::path& dir, const std::string& flag, bool force,
                      const std::string& other_way) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return check_creatable(dir, flag);
  GLM4_CHECK(fs::is_directory(dir, ec), flag, " ", dir.string(), ": exists and is not a directory");
  GLM4_CHECK(force || fs::is_empty(dir, ec), flag, " ", dir.string(),
             ": directory is not empty (it holds ", listing(dir), ")", other_way,
             "; use --force to write into it anyway");
}

const char* const kComputeFlagHelp =
    "Dtype of the frozen-weight products: auto (bf16 for bf16 weights on a CPU with AMX or "
    "AVX512-BF16, on Intel's AVX512-BF16 alone for decode sizes only; for 4/8-bit weights' "
    "products on AVX512-VNNI or AVX2 alone; else f32), f32 or bf16 "
    "(default auto)";

void add_compute_flag(CLI::App* app, std::string& value) {
  app->add_option("--compute", value, kComputeFlagHelp);
}

}  // namespace glm4::cli
