// The tokenizer of a model directory as llama.cpp's converter writes it into GGUF metadata
// (tokenizer.ggml.*, tokenizer.chat_template): token list, types, scores or merges, special ids.
//   tokenizer.json      -> "gpt2", pre "glm4", tokenizer.json's merges
//   tiktoken ranks      -> "gpt2", pre "chatglm-bpe", merges rebuilt from the ranks
//   sentencepiece       -> "llama" (SPM) with scores; ChatGLM2/3 (specials after the pieces) as
//                          the converter's chatglm3 path, pre "chatglm-spm"; else pre "default"
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace glm4 {

class GgufWriter;

// llama.cpp's token types (tokenizer.ggml.token_type).
enum GgufTokenType : int32_t {
  kTokNormal = 1,
  kTokUnknown = 2,
  kTokControl = 3,
  kTokUserDefined = 4,
  kTokUnused = 5,
  kTokByte = 6,
};

// Which converter class's special-token rules apply: Glm4 (Glm4ForCausalLM: eos, eot, unk and
// bos from <|endoftext|> / <|user|>), ChatGlm (ChatGLMModel / GlmForCausalLM: eos, eot, unk;
// add_bos_token false) or Glm4Moe (Glm4MoeForCausalLM, the converter's _set_vocab_glm: bos
// [gMASK], eot <|user|>, unk <|endoftext|>, eom <|observation|>).
enum class GgufVocabStyle { Glm4, ChatGlm, Glm4Moe };

struct GgufVocab {
  std::string model;  // tokenizer.ggml.model
  std::string pre;    // tokenizer.ggml.pre
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<float> scores;        // "llama" only
  std::vector<std::string> merges;  // "gpt2" only: "left right" in the byte-level alphabet
  std::vector<std::pair<std::string, int32_t>>
      special_ids;                                        // "bos", "eos", "eot", "unk", "pad", ...
  std::vector<std::pair<std::string, bool>> add_special;  // "bos" -> add_bos_token, ...
  std::optional<bool> add_space_prefix;
  std::string chat_template;       // empty: none
  std::vector<std::string> notes;  // what was approximated or skipped, for the user

  // Sets a special id unless that kind is set already or the id is outside the token list
  // (gguf-py's SpecialVocab keeps the first value it finds).
  void set_special(const std::string& kind, int32_t id);
  std::optional<int32_t> special(const std::string& kind) const;
  void set_add(const std::string& kind, bool value);  // the last value wins
};

// Reads the tokenizer files of `model_dir` (plus tokenizer_config.json, config.json,
// chat_template.jinja) and pads the token list to `vocab_size` (the model's embedding rows) with
// "[PAD{id}]" tokens of type unused. Without tokenizer files the model is "none" (no token list).
// Throws naming the file and field at fault, or when the tokenizer has more tokens than vocab_size.
GgufVocab build_gguf_vocab(const std::filesystem::path& model_dir, GgufVocabStyle style,
                           int64_t vocab_size);

// Writes the vocabulary's keys (tokenizer.ggml.model ... tokenizer.chat_template).
void add_vocab_metadata(const GgufVocab& vocab, GgufWriter& writer);

// The merges a BPE over tiktoken ranks implies, as llama.cpp's converter rebuilds them: for each
// token of two or more bytes, the byte-pair BPE restricted to lower ranks must end in exactly two
// parts, which become "left right" (byte-level strings), in rank order. Tokens that end in more
// parts have no merge; their count goes to *unreachable.
std::vector<std::string> merges_from_ranks(const std::vector<std::optional<std::string>>& ranks,
                                           size_t* unreachable);

// Raw bytes -> GPT-2 byte-level string (UTF-8).
std::string to_byte_level(std::string_view bytes);

}  // namespace glm4
