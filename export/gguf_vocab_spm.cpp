// GGUF "llama" (SPM) vocabularies from a sentencepiece model: ChatGLM2/3 through the converter's
// chatglm3 path, any other model (such as models/glm4-tiny) through _create_vocab_sentencepiece.
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "export/gguf_vocab_detail.h"
#include "io/file/json_file.h"
#include "io/tokenizer/file_io.h"
#include "io/tokenizer/sp_model_proto.h"
#include "io/tokenizer/tokenizer.h"

namespace glm4::gguf_vocab_detail {
namespace {

int32_t sp_token_type(int sp_type) {
  switch (sp_type) {
    case SpPiece::kUnknown:
      return kTokUnknown;
    case SpPiece::kControl:
      return kTokControl;
    case SpPiece::kUnused:
      return kTokUnused;
    case SpPiece::kByte:
      return kTokByte;
    // The converter's Python API cannot see user-defined pieces and writes them as normal;
    // llama.cpp then no longer matches them whole in text as sentencepiece does, so we keep
    // their type.
    case SpPiece::kUserDefined:
      return kTokUserDefined;
    default:
      return kTokNormal;
  }
}

// ChatGLM2/3: ids 0..2 renamed <unk>/<bos>/<eos>, the specials that follow the pieces are control
// tokens (user-defined otherwise), empty ids become [PAD{id}]; scores only for pieces.
void fill_chatglm(const std::vector<SpPiece>& pieces, const Tokenizer& tok, GgufVocab& v) {
  static const char* const kSpecials[] = {"[MASK]",   "[gMASK]",       "[sMASK]",
                                          "sop",      "eop",           "<|system|>",
                                          "<|user|>", "<|assistant|>", "<|observation|>"};
  v.pre = "chatglm-spm";
  for (size_t id = 0; id < pieces.size(); ++id) {
    std::string text = id == 0 ? "<unk>" : id == 1 ? "<bos>" : id == 2 ? "<eos>" : pieces[id].text;
    v.tokens.push_back(std::move(text));
    v.scores.push_back(pieces[id].text.empty() ? 0.0f : pieces[id].score);
    v.types.push_back(sp_token_type(pieces[id].type));
  }
  for (int32_t id = int32_t(pieces.size()); id < tok.vocab_size(); ++id) {
    const int32_t one[1] = {id};
    const std::string text = tok.decode(one);
    bool control = false;
    for (const char* s : kSpecials) control = control || text == s;
    v.tokens.push_back(text.empty() ? str_cat("[PAD", id, "]") : text);
    v.scores.push_back(0.0f);
    v.types.push_back(text.empty() ? kTokUnused : control ? kTokControl : kTokUserDefined);
  }
}

// tokenizer_config.json's added_tokens_decoder overrides pieces (score -1000), as the converter's
// _create_vocab_sentencepiece does.
void apply_added_tokens_decoder(const std::filesystem::path& dir, GgufVocab& v,
                                int64_t vocab_size) {
  const auto path = dir / "tokenizer_config.json";
  if (!std::filesystem::exists(path)) return;
  const nlohmann::json config = read_json_file(path);
  if (!config.is_object() || !config.contains("added_tokens_decoder")) return;
  for (const auto& [key, value] : config["added_tokens_decoder"].items()) {
    GLM4_CHECK(value.is_object() && value.contains("content") && value["content"].is_string(),
               path.string(), ": added_tokens_decoder.", key, " has no content");
    int64_t id = -1;
    try {
      id = std::stoll(key);
    } catch (const std::exception&) {
      fail(path.string(), ": added_tokens_decoder key '", key, "' is not a token id");
    }
    if (id < 0 || id >= vocab_size) continue;  // the converter warns and ignores these
    while (int64_t(v.tokens.size()) <= id) {
      v.tokens.push_back(str_cat("[PAD", v.tokens.size(), "]"));
      v.types.push_back(kTokUnused);
      v.scores.push_back(-10000.0f);
    }
    std::string content = value["content"].get<std::string>();
    if (value.value("special", false) || looks_special(content)) {
      v.types[size_t(id)] = kTokControl;
    } else {
      for (size_t p; (p = content.find("\xE2\x96\x81")) != std::string::npos;)
        content.replace(p, 3, 1, ' ');
      v.types[size_t(id)] = kTokUserDefined;
    }
    v.scores[size_t(id)] = -1000.0f;
    v.tokens[size_t(id)] = std::move(content);
  }
}

}  // namespace

void fill_from_sentencepiece(const std::filesystem::path& file, int64_t vocab_size, GgufVocab& v) {
  const std::string where = file.string();
  const std::string proto = tok_io::read_file(file);
  const std::vector<SpPiece> pieces = read_sp_pieces(proto, where);
  const std::unique_ptr<Tokenizer> tok = load_sentencepiece(file);
  v.model = "llama";
  if (tok->vocab_size() > int32_t(pieces.size())) {  // specials after the pieces: ChatGLM2/3
    fill_chatglm(pieces, *tok, v);
    pad_to(v, vocab_size, where, 0.0f);
    return;
  }
  v.pre = "default";
  for (const SpPiece& p : pieces) {
    v.tokens.push_back(p.text);
    v.scores.push_back(p.score);
    v.types.push_back(sp_token_type(p.type));
  }
  pad_to(v, vocab_size, where, -10000.0f);
  apply_added_tokens_decoder(file.parent_path(), v, vocab_size);
  // llama.cpp prepends a space to SPM text unless told otherwise; sentencepiece does so only with
  // add_dummy_prefix.
  if (!read_sp_normalizer(proto, where).add_dummy_prefix) v.add_space_prefix = false;
}

}  // namespace glm4::gguf_vocab_detail
