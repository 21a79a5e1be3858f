// Picks the tokenizer file of a model directory, then adds what gguf-py's SpecialVocab and the
// GLM converter classes add: special ids, add_*_token flags and the chat template.
#include "export/gguf_vocab.h"

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "export/gguf_vocab_detail.h"
#include "export/gguf_writer.h"
#include "io/file/json_file.h"
#include "io/tokenizer/file_io.h"
#include "io/tokenizer/tokenizer.h"

namespace glm4 {
namespace {

using gguf_vocab_detail::AddedToken;
using nlohmann::json;

// The special-token kinds SpecialVocab reads from tokenizer_config.json and config.json.
const char* const kSpecialKinds[] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};

std::optional<json> read_json(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) return std::nullopt;
  json j = read_json_file(path);
  GLM4_CHECK(j.is_object(), path.string(), ": not a JSON object");
  return j;
}

// tokenizer_config.json: chat template, add_*_token, and {kind}_token names resolved against
// tokenizer.json's added tokens (without a tokenizer.json nothing resolves, as in gguf-py).
void apply_tokenizer_config(const std::filesystem::path& dir, const std::vector<AddedToken>& added,
                            GgufVocab& v) {
  const std::optional<json> config = read_json(dir / "tokenizer_config.json");
  if (!config) return;
  const std::string where = (dir / "tokenizer_config.json").string();
  if (config->contains("chat_template") && !(*config)["chat_template"].is_null()) {
    const json& t = (*config)["chat_template"];
    if (t.is_string()) {
      v.chat_template = t.get<std::string>();
    } else if (t.is_array()) {  // [{name, template}, ...]: the default one
      for (const json& e : t)
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
            e["template"].is_string())
          v.chat_template = e["template"].get<std::string>();
      v.notes.push_back(where + ": only the default of its named chat templates is exported");
    } else {
      fail(where, ": chat_template is a JSON ", t.type_name(), ", expected a string");
    }
  } else if (std::filesystem::exists(dir / "chat_template.jinja")) {
    v.chat_template = tok_io::read_file(dir / "chat_template.jinja");
  } else if (const std::optional<json> ct = read_json(dir / "chat_template.json")) {
    if (ct->contains("chat_template") && (*ct)["chat_template"].is_string())
      v.chat_template = (*ct)["chat_template"].get<std::string>();
  }
  for (const char* kind : kSpecialKinds) {
    const std::string add_key = str_cat("add_", kind, "_token");
    if (config->contains(add_key) && (*config)[add_key].is_boolean())
      v.set_add(kind, (*config)[add_key].get<bool>());
    const std::string key = str_cat(kind, "_token");
    if (!config->contains(key)) continue;
    const json& entry = (*config)[key];
    std::string content;
    if (entry.is_string()) {
      content = entry.get<std::string>();
    } else if (entry.is_object() && entry.contains("content") && entry["content"].is_string()) {
      content = entry["content"].get<std::string>();
    } else {
      continue;
    }
    for (const AddedToken& t : added) {
      if (t.content == content) {
        v.set_special(kind, t.id);
        break;
      }
    }
  }
}

// config.json: {kind}_token_id when it is a single integer (lists are skipped, as in gguf-py).
void apply_model_config(const std::filesystem::path& dir, GgufVocab& v) {
  const std::optional<json> config = read_json(dir / "config.json");
  if (!config) return;
  for (const char* kind : kSpecialKinds) {
    const std::string key = str_cat(kind, "_token_id");
    if (config->contains(key) && (*config)[key].is_number_integer())
      v.set_special(kind, (*config)[key].get<int32_t>());
  }
}

std::optional<int32_t> find_token(const GgufVocab& v, std::string_view text) {
  for (size_t id = 0; id < v.tokens.size(); ++id)
    if (v.types[id] != kTokNormal && v.tokens[id] == text) return int32_t(id);
  return std::nullopt;
}

// The GLM converter classes: Glm4Model sets eos, eot, unk and bos; ChatGLMModel eos, eot, unk
// (its chatglm3 path none) and add_bos_token = false; Glm4MoeModel bos, eot, unk and eom.
void apply_family_rules(GgufVocabStyle style, GgufVocab& v) {
  // The converter writes add_bos_token = false before the vocabulary, whose tokenizer_config.json
  // value (applied already) then overwrites it.
  auto no_bos_unless_configured = [&] {
    for (const auto& [kind, value] : v.add_special)
      if (kind == "bos") return;
    v.set_add("bos", false);
  };
  const std::optional<int32_t> end = find_token(v, "<|endoftext|>");
  const std::optional<int32_t> user = find_token(v, "<|user|>");
  if (v.pre == "chatglm-spm") {
    no_bos_unless_configured();
    return;
  }
  if (v.model == "llama") {  // our own SPM models: sentencepiece's unknown piece, no BOS prefix
    for (size_t id = 0; id < v.types.size(); ++id)
      if (v.types[id] == kTokUnknown) v.set_special("unk", int32_t(id));
    no_bos_unless_configured();
  }
  if (style == GgufVocabStyle::Glm4Moe) {  // eos only from the tokenizer and model configs
    if (auto gmask = find_token(v, "[gMASK]")) v.set_special("bos", *gmask);
    if (user) v.set_special("eot", *user);
    if (end) v.set_special("unk", *end);
    if (auto observation = find_token(v, "<|observation|>")) v.set_special("eom", *observation);
    return;
  }
  if (end) v.set_special("eos", *end);
  if (user) v.set_special("eot", *user);
  if (end) v.set_special("unk", *end);
  if (style == GgufVocabStyle::Glm4 && end) v.set_special("bos", *end);
  if (style == GgufVocabStyle::ChatGlm) no_bos_unless_configured();
}

}  // namespace

void GgufVocab::set_special(const std::string& kind, int32_t id) {
  if (id < 0 || size_t(id) >= tokens.size() || special(kind)) return;
  special_ids.emplace_back(kind, id);
}

std::optional<int32_t> GgufVocab::special(const std::string& kind) const {
  for (const auto& [k, id] : special_ids)
    if (k == kind) return id;
  return std::nullopt;
}

void GgufVocab::set_add(const std::string& kind, bool value) {
  for (auto& [k, v] : add_special) {
    if (k == kind) {
      v = value;
      return;
    }
  }
  add_special.emplace_back(kind, value);
}

GgufVocab build_gguf_vocab(const std::filesystem::path& dir, GgufVocabStyle style,
                           int64_t vocab_size) {
  GgufVocab v;
  std::vector<AddedToken> added;
  const auto json_file = dir / "tokenizer.json";
  const auto model_file = dir / "tokenizer.model";
  if (std::filesystem::exists(json_file)) {
    gguf_vocab_detail::fill_from_tokenizer_json(json_file, vocab_size, v, &added);
  } else if (std::filesystem::exists(model_file) && looks_like_tiktoken(model_file)) {
    gguf_vocab_detail::fill_from_tiktoken(model_file, vocab_size, v);
  } else if (std::filesystem::exists(model_file)) {
    gguf_vocab_detail::fill_from_sentencepiece(model_file, vocab_size, v);
  } else {  // the converter's _set_vocab_none: llama.cpp loads it and runs on token ids
    v.model = "none";
    v.notes.push_back(
        str_cat("no tokenizer.json or tokenizer.model in ", dir.string(),
                ": tokenizer.ggml.model = none (llama.cpp can only run it on token ids)"));
    return v;
  }
  apply_tokenizer_config(dir, added, v);
  apply_model_config(dir, v);
  apply_family_rules(style, v);
  return v;
}

void add_vocab_metadata(const GgufVocab& v, GgufWriter& w) {
  w.set("tokenizer.ggml.model", GgufValue::of_string(v.model));
  if (v.model == "none") return;
  w.set("tokenizer.ggml.pre", GgufValue::of_string(v.pre));
  w.set("tokenizer.ggml.tokens", GgufValue::string_array(v.tokens));
  if (!v.scores.empty()) w.set("tokenizer.ggml.scores", GgufValue::f32_array(v.scores));
  w.set("tokenizer.ggml.token_type", GgufValue::i32_array(v.types));
  if (!v.merges.empty()) w.set("tokenizer.ggml.merges", GgufValue::string_array(v.merges));
  // gguf-py's key names (sic: "seperator").
  const std::pair<const char*, const char*> keys[] = {
      {"bos", "bos_token_id"},     {"eos", "eos_token_id"},     {"eot", "eot_token_id"},
      {"eom", "eom_token_id"},     {"unk", "unknown_token_id"}, {"sep", "seperator_token_id"},
      {"pad", "padding_token_id"}, {"cls", "cls_token_id"},     {"mask", "mask_token_id"}};
  for (const auto& [kind, id] : v.special_ids) {
    for (const auto& [k, key] : keys)
      if (kind == k) w.set(str_cat("tokenizer.ggml.", key), GgufValue::of_u32(uint32_t(id)));
  }
  for (const auto& [kind, value] : v.add_special)
    w.set(str_cat("tokenizer.ggml.add_", kind, "_token"), GgufValue::of_bool(value));
  if (v.add_space_prefix)
    w.set("tokenizer.ggml.add_space_prefix", GgufValue::of_bool(*v.add_space_prefix));
  if (!v.chat_template.empty())
    w.set("tokenizer.chat_template", GgufValue::of_string(v.chat_template));
}

}  // namespace glm4
