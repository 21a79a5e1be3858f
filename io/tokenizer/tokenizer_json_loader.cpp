// Loads a Hugging Face tokenizer.json holding a byte-level BPE (GLM-4-0414, glm-4-9b-chat-hf):
// model.vocab + model.merges, the GLM-4 Split regex + ByteLevel pre-tokenizer, added_tokens.
// Anything else (normalizers, other regexes, dropout...) is refused with the field named.
#include <array>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "base/check.h"
#include "io/file/json_depth.h"
#include "io/tokenizer/byte_level_alphabet.h"
#include "io/tokenizer/byte_level_tokenizer.h"
#include "io/tokenizer/file_io.h"
#include "io/tokenizer/pretokenizer.h"
#include "io/tokenizer/tokenizer.h"
#include "io/tokenizer/utf8.h"

namespace glm4 {
namespace {

using nlohmann::json;

class ByteLevelDecoder {
 public:
  ByteLevelDecoder() {
    const auto map = byte_to_unicode();
    for (uint32_t b = 0; b < 256; ++b) to_byte_[map[b]] = int16_t(b);
  }
  // The raw bytes a byte-level token string stands for; nullopt if a char is not in the map.
  std::optional<std::string> bytes(std::string_view token) const {
    std::string out;
    for (size_t i = 0; i < token.size();) {
      int len = 0;
      const uint32_t cp = utf8::decode(token, i, &len);
      if (cp >= to_byte_.size() || to_byte_[cp] < 0) return std::nullopt;
      out += char(to_byte_[cp]);
      i += len;
    }
    return out;
  }

 private:
  std::array<int16_t, 324> to_byte_ = [] {
    std::array<int16_t, 324> a{};
    a.fill(-1);
    return a;
  }();
};

bool is_null_or_absent(const json& obj, const char* key) {
  return !obj.contains(key) || obj[key].is_null();
}

void check_pre_tokenizer(const json& pre, const std::string& where) {
  std::vector<json> steps;
  if (pre.is_object() && pre.value("type", "") == "Sequence") {
    for (const auto& p : pre.at("pretokenizers")) steps.push_back(p);
  } else {
    steps.push_back(pre);
  }
  bool split_ok = false, byte_level_ok = false;
  for (const auto& p : steps) {
    const std::string type = p.value("type", "");
    if (type == "Split") {
      const std::string regex = p.contains("pattern") ? p["pattern"].value("Regex", "") : "";
      GLM4_CHECK(regex == kGlm4PretokenizerRegex, where,
                 ": pre_tokenizer Split regex is not the GLM-4 pattern (unsupported): ", regex);
      GLM4_CHECK(p.value("behavior", "") == "Isolated" && !p.value("invert", false), where,
                 ": pre_tokenizer Split must be behavior Isolated, invert false");
      split_ok = true;
    } else if (type == "ByteLevel") {
      GLM4_CHECK(!p.value("use_regex", true) && !p.value("add_prefix_space", false), where,
                 ": pre_tokenizer ByteLevel must have use_regex false and add_prefix_space false");
      byte_level_ok = true;
    } else {
      fail(where, ": unsupported pre_tokenizer type '", type, "'");
    }
  }
  GLM4_CHECK(split_ok && byte_level_ok, where,
             ": pre_tokenizer must be Split(GLM-4 regex) followed by ByteLevel");
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::filesystem::path& file) {
  const std::string where = file.string();
  json j;
  try {
    const std::string text = tok_io::read_file(file);
    check_json_depth(text, where);
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(where, ": ", e.what());
  }
  try {
    GLM4_CHECK(j.is_object() && j.contains("model"), where, ": no 'model' object");
    const json& model = j["model"];
    GLM4_CHECK(model.value("type", "BPE") == "BPE", where, ": model.type '",
               model.value("type", ""), "' is not BPE");
    GLM4_CHECK(is_null_or_absent(model, "dropout"), where, ": model.dropout is not supported");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      GLM4_CHECK(is_null_or_absent(model, key) || model[key] == "", where, ": model.", key,
                 " is not supported");
    }
    GLM4_CHECK(!model.value("byte_fallback", false), where,
               ": model.byte_fallback is not supported");
    GLM4_CHECK(is_null_or_absent(j, "normalizer"), where, ": normalizer is not supported");
    GLM4_CHECK(!is_null_or_absent(j, "pre_tokenizer"), where, ": no pre_tokenizer");
    check_pre_tokenizer(j["pre_tokenizer"], where);
    if (!is_null_or_absent(j, "decoder")) {
      GLM4_CHECK(j["decoder"].value("type", "") == "ByteLevel", where,
                 ": unsupported decoder type '", j["decoder"].value("type", ""), "'");
    }

    // Counts before anything is allocated for them.
    if (const auto m = model.find("merges"); m != model.end() && m->is_array()) {
      GLM4_CHECK(int64_t(m->size()) <= kMaxTokenizerMerges, where, ": model.merges has ", m->size(),
                 " entries (limit kMaxTokenizerMerges = ", kMaxTokenizerMerges, ")");
    }

    // Vocabulary: byte-level strings -> raw bytes.
    const ByteLevelDecoder byte_level;
    const json& vocab = model.at("vocab");
    GLM4_CHECK(vocab.is_object(), where, ": model.vocab is not an object");
    std::vector<std::optional<std::string>> tokens;
    std::unordered_map<std::string, int32_t> id_of_string;
    id_of_string.reserve(vocab.size());
    for (const auto& [token, id_json] : vocab.items()) {
      GLM4_CHECK(id_json.is_number_integer(), where, ": model.vocab['", token, "'] is not an id");
      const int64_t id = id_json.get<int64_t>();
      GLM4_CHECK(id >= 0 && id < kMaxTokenizerVocab, where, ": model.vocab['", token, "'] = ", id,
                 " is out of range [0, kMaxTokenizerVocab = ", kMaxTokenizerVocab, ")");
      auto bytes = byte_level.bytes(token);
      GLM4_CHECK(bytes, where, ": model.vocab token '", token,
                 "' has a character outside the byte-level alphabet");
      if (size_t(id) >= tokens.size()) tokens.resize(id + 1);
      GLM4_CHECK(!tokens[id], where, ": model.vocab gives id ", id, " twice");
      tokens[id] = std::move(*bytes);
      id_of_string.emplace(token, int32_t(id));
    }
    ByteBpe bpe(std::move(tokens), where);

    // Merges: "a b" strings (older files) or ["a", "b"] pairs; rank = position.
    const json& merges = model.at("merges");
    GLM4_CHECK(merges.is_array(), where, ": model.merges is not an array");
    bpe.reserve_merges(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const json& m = merges[rank];
      std::string a, b;
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ');
        GLM4_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < s.size(), where, ": model.merges[",
                   rank, "] = '", s, "' is not 'a b'");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else {
        GLM4_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), where,
                   ": model.merges[", rank, "] is neither 'a b' nor [a, b]");
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      }
      const auto ia = id_of_string.find(a), ib = id_of_string.find(b),
                 iab = id_of_string.find(a + b);
      GLM4_CHECK(ia != id_of_string.end() && ib != id_of_string.end() && iab != id_of_string.end(),
                 where, ": model.merges[", rank, "] ('", a, "', '", b,
                 "') uses a token missing from model.vocab");
      bpe.add_merge(ia->second, ib->second, iab->second, int32_t(rank));
    }
    bpe.set_whole_piece_lookup(model.value("ignore_merges", false));

    SpecialTokens specials, plain;
    if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
      size_t k = 0;
      for (const auto& t : j["added_tokens"]) {
        const std::string at = str_cat(where, ": added_tokens[", k++, "]");
        GLM4_CHECK(t.contains("id") && t["id"].is_number_integer() && t.contains("content") &&
                       t["content"].is_string(),
                   at, " needs an integer id and a string content");
        GLM4_CHECK(t["id"].get<int64_t>() >= 0 && t["id"].get<int64_t>() < kMaxTokenizerVocab, at,
                   " has id ", t["id"].get<int64_t>(),
                   " out of range [0, kMaxTokenizerVocab = ", kMaxTokenizerVocab, ")");
        for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
          GLM4_CHECK(!t.value(flag, false), at, " ('", t["content"].get<std::string>(),
                     "'): ", flag, "=true is not supported");
        }
        (t.value("special", false) ? specials : plain)
            .add(t["content"].get<std::string>(), t["id"].get<int32_t>(), at);
      }
    }
    return std::make_unique<ByteLevelTokenizer>(std::move(bpe), std::move(specials),
                                                std::move(plain), "bpe-json");
  } catch (const json::exception& e) {
    fail(where, ": ", e.what());
  }
}

}  // namespace glm4
