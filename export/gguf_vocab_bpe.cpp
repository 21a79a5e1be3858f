// GGUF "gpt2" vocabularies: tokenizer.json (get_vocab_base in llama.cpp's converter) and tiktoken
// rank files (the merges rebuilt from the ranks, as its ChatGLM/Qwen code does).
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "base/check.h"
#include "export/gguf_vocab_detail.h"
#include "io/file/json_file.h"
#include "io/tokenizer/byte_level_alphabet.h"
#include "io/tokenizer/tiktoken_ranks.h"
#include "io/tokenizer/tokenizer.h"
#include "io/tokenizer/utf8.h"

namespace glm4 {
namespace gguf_vocab_detail {
namespace {

using nlohmann::json;

constexpr int64_t kMaxId = int64_t(1) << 24;

// The pieces a byte-level BPE over `rank` reaches when only merges of rank < max_rank are
// allowed: start from single bytes, repeatedly join the adjacent pair of lowest rank.
std::vector<std::string> bpe_parts(const std::unordered_map<std::string, int32_t>& rank,
                                   const std::string& token, int32_t max_rank) {
  std::vector<std::string> parts;
  for (char c : token) parts.emplace_back(1, c);
  while (parts.size() > 1) {
    size_t best = 0;
    int32_t best_rank = -1;
    for (size_t k = 0; k + 1 < parts.size(); ++k) {
      auto it = rank.find(parts[k] + parts[k + 1]);
      if (it != rank.end() && it->second < max_rank && (best_rank < 0 || it->second < best_rank)) {
        best = k;
        best_rank = it->second;
      }
    }
    if (best_rank < 0) break;
    parts[best] += parts[best + 1];
    parts.erase(parts.begin() + long(best) + 1);
  }
  return parts;
}

}  // namespace

bool looks_special(std::string_view t) {
  auto wrapped = [&](std::string_view open, std::string_view close) {
    return t.size() >= open.size() + close.size() && t.substr(0, open.size()) == open &&
           t.substr(t.size() - close.size()) == close;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xEF\xBD\x9C", "\xEF\xBD\x9C>") || wrapped("<unused", ">");
}

void pad_to(GgufVocab& v, int64_t vocab_size, const std::string& source, float score) {
  GLM4_CHECK(int64_t(v.tokens.size()) <= vocab_size, source, ": the tokenizer has ",
             v.tokens.size(), " tokens but the model's vocab_size is ", vocab_size);
  while (int64_t(v.tokens.size()) < vocab_size) {
    v.tokens.push_back(str_cat("[PAD", v.tokens.size(), "]"));
    v.types.push_back(kTokUnused);
    if (v.model == "llama") v.scores.push_back(score);
  }
}

void fill_from_tokenizer_json(const std::filesystem::path& file, int64_t vocab_size, GgufVocab& v,
                              std::vector<AddedToken>* added) {
  const std::string where = file.string();
  const json j = read_json_file(file);
  GLM4_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), where,
             ": no 'model' object");
  const json& model = j["model"];
  GLM4_CHECK(model.contains("vocab") && model["vocab"].is_object(), where,
             ": model.vocab is not an object");
  GLM4_CHECK(model.contains("merges") && model["merges"].is_array(), where,
             ": model.merges is not an array");
  v.model = "gpt2";
  v.pre = "glm4";

  std::vector<std::string> by_id;
  std::vector<int8_t> kind;  // 0 absent, 1 vocab, 2 added special, 3 added plain
  auto place = [&](int64_t id, std::string text, int8_t k, const std::string& field) {
    GLM4_CHECK(id >= 0 && id < kMaxId, where, ": ", field, " has id ", id, " out of range");
    if (id >= int64_t(by_id.size())) {
      by_id.resize(size_t(id) + 1);
      kind.resize(size_t(id) + 1, 0);
    }
    by_id[size_t(id)] = std::move(text);
    kind[size_t(id)] = k;
  };
  for (const auto& [token, id] : model["vocab"].items()) {
    GLM4_CHECK(id.is_number_integer(), where, ": model.vocab['", token, "'] is not an id");
    place(id.get<int64_t>(), token, 1, str_cat("model.vocab['", token, "']"));
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    size_t k = 0;
    for (const json& t : j["added_tokens"]) {
      const std::string field = str_cat("added_tokens[", k++, "]");
      GLM4_CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer() &&
                     t.contains("content") && t["content"].is_string(),
                 where, ": ", field, " needs an integer id and a string content");
      const bool special = t.value("special", false);
      const std::string content = t["content"].get<std::string>();
      place(t["id"].get<int64_t>(), content, special ? 2 : 3, field);
      if (added) added->push_back({t["id"].get<int32_t>(), content, special});
    }
  }
  GLM4_CHECK(int64_t(by_id.size()) <= vocab_size, where, ": token id ", by_id.size() - 1,
             " does not fit the model's vocab_size ", vocab_size);
  for (size_t id = 0; id < by_id.size(); ++id) {
    if (kind[id] == 0) {
      v.tokens.push_back(str_cat("[PAD", id, "]"));
      v.types.push_back(kTokUnused);
    } else if (kind[id] == 1) {
      v.tokens.push_back(by_id[id]);
      v.types.push_back(kTokNormal);
    } else if (kind[id] == 2 || looks_special(by_id[id])) {
      v.tokens.push_back(by_id[id]);
      v.types.push_back(kTokControl);
    } else {  // user-defined: the converter writes sentencepiece's U+2581 as a plain space
      std::string t = by_id[id];
      for (size_t p; (p = t.find("\xE2\x96\x81")) != std::string::npos;) t.replace(p, 3, " ");
      v.tokens.push_back(t);
      v.types.push_back(kTokUserDefined);
    }
  }
  pad_to(v, vocab_size, where, 0);

  const json& merges = model["merges"];
  v.merges.reserve(merges.size());
  for (size_t k = 0; k < merges.size(); ++k) {
    const json& m = merges[k];
    if (m.is_string()) {
      v.merges.push_back(m.get<std::string>());
      continue;
    }
    GLM4_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), where,
               ": model.merges[", k, "] is neither 'a b' nor [a, b]");
    std::string line;
    for (int side = 0; side < 2; ++side) {  // a space inside a part is written as U+0120
      for (char c : m[side].get<std::string>())
        line += c == ' ' ? std::string("\xC4\xA0") : std::string(1, c);
      if (side == 0) line += ' ';
    }
    v.merges.push_back(std::move(line));
  }
}

void fill_from_tiktoken(const std::filesystem::path& file, int64_t vocab_size, GgufVocab& v) {
  const std::string where = file.string();
  const std::vector<std::optional<std::string>> ranks = read_tiktoken_ranks(file);
  v.model = "gpt2";
  v.pre = "chatglm-bpe";
  for (size_t r = 0; r < ranks.size(); ++r) {
    v.tokens.push_back(ranks[r] ? to_byte_level(*ranks[r]) : str_cat("[PAD", r, "]"));
    v.types.push_back(ranks[r] ? kTokNormal : kTokUnused);
  }
  // Special tokens follow the ranks (tokenizer_config.json's added_tokens_decoder, or the
  // ChatGLM4Tokenizer defaults): the tokenizer knows them by id.
  const std::unique_ptr<Tokenizer> tok = load_tiktoken(file);
  for (int32_t id = int32_t(ranks.size()); id < tok->vocab_size(); ++id) {
    const int32_t one[1] = {id};
    const std::string text = tok->decode(one);
    v.tokens.push_back(text.empty() ? str_cat("[PAD", id, "]") : text);
    v.types.push_back(text.empty() ? kTokUnused : kTokControl);
  }
  pad_to(v, vocab_size, where, 0);
  size_t unreachable = 0;
  v.merges = merges_from_ranks(ranks, &unreachable);
  if (unreachable > 0) {
    v.notes.push_back(str_cat(unreachable,
                              " tiktoken tokens cannot be reached by two-part merges of "
                              "lower rank; like llama.cpp's converter, they get no merge"));
  }
}

}  // namespace gguf_vocab_detail

std::string to_byte_level(std::string_view bytes) {
  static const std::array<uint32_t, 256> map = byte_to_unicode();
  std::string out;
  for (unsigned char c : bytes) utf8::append(out, map[c]);
  return out;
}

std::vector<std::string> merges_from_ranks(const std::vector<std::optional<std::string>>& ranks,
                                           size_t* unreachable) {
  std::unordered_map<std::string, int32_t> rank;
  rank.reserve(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r)
    if (ranks[r]) rank.emplace(*ranks[r], int32_t(r));
  std::vector<std::string> merges;
  *unreachable = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r] || ranks[r]->size() < 2) continue;
    const std::vector<std::string> parts =
        gguf_vocab_detail::bpe_parts(rank, *ranks[r], int32_t(r));
    if (parts.size() != 2) {
      ++*unreachable;
      continue;
    }
    merges.push_back(to_byte_level(parts[0]) + " " + to_byte_level(parts[1]));
  }
  return merges;
}

}  // namespace glm4
