// tiktoken rank files: strict base64 per line, ranks indexed densely.
#include "io/tokenizer/tiktoken_ranks.h"

#include "base/check.h"
#include "io/tokenizer/file_io.h"
#include "io/tokenizer/tokenizer.h"

namespace glm4 {
namespace {

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Strict standard base64 with padding; nullopt if malformed.
std::optional<std::string> base64_decode(std::string_view s) {
  if (s.empty() || s.size() % 4 != 0) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < s.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s[i + k];
      if (c == '=' && i + 4 == s.size() && k >= 2) {
        v[k] = 0;
        ++pad;
      } else {
        if (pad > 0) return std::nullopt;  // data after padding
        v[k] = base64_value(c);
        if (v[k] < 0) return std::nullopt;
      }
    }
    const uint32_t triple = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out += char(triple >> 16);
    if (pad < 2) out += char((triple >> 8) & 0xFF);
    if (pad < 1) out += char(triple & 0xFF);
  }
  return out;
}

bool rank_line(std::string_view line) {
  const size_t sp = line.find(' ');
  if (sp == 0 || sp == std::string_view::npos || sp + 1 >= line.size()) return false;
  for (size_t i = 0; i < sp; ++i) {
    if (base64_value(line[i]) < 0 && line[i] != '=') return false;
  }
  for (size_t i = sp + 1; i < line.size(); ++i) {
    if (line[i] < '0' || line[i] > '9') return false;
  }
  return true;
}

}  // namespace

bool is_tiktoken_rank_line(std::string_view line) { return rank_line(line); }

std::vector<std::optional<std::string>> read_tiktoken_ranks(const std::filesystem::path& file) {
  const std::string where = file.string();
  const std::string text = tok_io::read_file(file);
  std::vector<std::optional<std::string>> tokens;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    GLM4_CHECK(rank_line(line), where, ":", line_no, ": expected '<base64> <rank>', got '",
               line.substr(0, 80), "'");
    const size_t sp = line.find(' ');
    const auto bytes = base64_decode(line.substr(0, sp));
    GLM4_CHECK(bytes, where, ":", line_no, ": malformed base64 '", line.substr(0, sp), "'");
    const std::string_view rank_text = line.substr(sp + 1);
    const size_t rank =
        rank_text.size() <= 9 ? std::stoul(std::string(rank_text)) : size_t(kMaxTokenizerVocab);
    GLM4_CHECK(rank < size_t(kMaxTokenizerVocab), where, ":", line_no, ": rank ", rank_text,
               " is too large (limit kMaxTokenizerVocab = ", kMaxTokenizerVocab, ")");
    if (rank >= tokens.size()) tokens.resize(rank + 1);
    GLM4_CHECK(!tokens[rank], where, ":", line_no, ": rank ", rank, " appears twice");
    tokens[rank] = *bytes;
  }
  return tokens;
}

}  // namespace glm4
