// Loads a tiktoken rank file (glm-4-9b-chat tokenizer.model): one "<base64 bytes> <rank>" line per
// mergeable token; special tokens follow the ranks, as tokenizer_config.json lists them (or, without
// it, in the order of the official ChatGLM4Tokenizer).
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "io/tokenizer/byte_level_tokenizer.h"
#include "io/tokenizer/file_io.h"
#include "io/tokenizer/tokenizer.h"

namespace glm4 {
namespace {

constexpr size_t kMaxRank = size_t(1) << 24;

// glm-4-9b-chat tokenization_chatglm.py: ids len(ranks) + i.
const char* const kGlm4Specials[] = {
    "<|endoftext|>", "[MASK]",          "[gMASK]",           "[sMASK]",
    "<sop>",         "<eop>",           "<|system|>",        "<|user|>",
    "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>",
    "<|begin_of_video|>", "<|end_of_video|>"};

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

bool is_rank_line(std::string_view line) {
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

bool looks_like_tiktoken(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  GLM4_CHECK(in, "cannot open tokenizer file ", file.string());
  std::string line;
  char c;
  while (line.size() < 4096 && in.get(c) && c != '\n') line += c;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return is_rank_line(line);
}

std::unique_ptr<Tokenizer> load_tiktoken(const std::filesystem::path& file) {
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
    GLM4_CHECK(is_rank_line(line), where, ":", line_no, ": expected '<base64> <rank>', got '",
               line.substr(0, 80), "'");
    const size_t sp = line.find(' ');
    const auto bytes = base64_decode(line.substr(0, sp));
    GLM4_CHECK(bytes, where, ":", line_no, ": malformed base64 '", line.substr(0, sp), "'");
    const std::string_view rank_text = line.substr(sp + 1);
    const size_t rank = rank_text.size() <= 9 ? std::stoul(std::string(rank_text)) : kMaxRank;
    GLM4_CHECK(rank < kMaxRank, where, ":", line_no, ": rank ", rank_text, " is too large");
    if (rank >= tokens.size()) tokens.resize(rank + 1);
    GLM4_CHECK(!tokens[rank], where, ":", line_no, ": rank ", rank, " appears twice");
    tokens[rank] = *bytes;
  }
  GLM4_CHECK(!tokens.empty(), where, ": no ranks found");
  const int32_t n_ranks = int32_t(tokens.size());
  ByteBpe bpe(std::move(tokens), where);
  bpe.derive_merges_from_ranks();
  bpe.set_whole_piece_lookup(true);

  SpecialTokens specials;
  const auto config_path = file.parent_path() / "tokenizer_config.json";
  std::map<int32_t, std::string> from_config;
  if (std::filesystem::exists(config_path)) {
    nlohmann::json config;
    try {
      std::ifstream in(config_path);
      config = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      fail(config_path.string(), ": ", e.what());
    }
    if (config.contains("added_tokens_decoder")) {
      for (const auto& [key, value] : config["added_tokens_decoder"].items()) {
        GLM4_CHECK(value.is_object() && value.contains("content") && value["content"].is_string(),
                   config_path.string(), ": added_tokens_decoder.", key, " has no content");
        int32_t id = -1;
        try {
          id = std::stoi(key);
        } catch (const std::exception&) {
        }
        GLM4_CHECK(id >= n_ranks, config_path.string(), ": added_tokens_decoder.", key,
                   " must be an id at or after the ", n_ranks, " ranks of ", where);
        from_config[id] = value["content"].get<std::string>();
      }
    }
  }
  if (from_config.empty()) {
    for (size_t i = 0; i < std::size(kGlm4Specials); ++i) specials.add(kGlm4Specials[i], n_ranks + int32_t(i), where);
  } else {
    for (const auto& [id, content] : from_config) specials.add(content, id, config_path.string());
  }
  return std::make_unique<ByteLevelTokenizer>(std::move(bpe), std::move(specials), SpecialTokens{},
                                              "tiktoken");
}

}  // namespace glm4
