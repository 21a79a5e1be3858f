// Tokenizer interface and the loader that picks the right implementation for a model directory:
// tokenizer.json -> byte-level BPE ("bpe-json"); tokenizer.model -> tiktoken ranks ("tiktoken") if
// it is text of "base64 rank" lines, else a sentencepiece model ("sentencepiece").
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace glm4 {

// Limits on tokenizer files (errors name the file and the limit). Real vocabularies hold 65k
// to 256k tokens; ids index dense tables, so an id bounds memory as much as a count does.
constexpr int64_t kMaxTokenizerVocab = int64_t(1) << 21;   // token ids (ranks, pieces) below this
constexpr int64_t kMaxTokenizerMerges = int64_t(1) << 21;  // tokenizer.json model.merges

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Plain encoding: never adds a prefix such as [gMASK]<sop> (the chat template does that).
  // allow_special: literal special-token strings in text (e.g. "<|user|>") become their ids;
  // otherwise they are encoded as ordinary text.
  virtual std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const = 0;
  // Ill-formed UTF-8 (a character cut between tokens) comes out as U+FFFD, so the result is
  // always valid UTF-8. Special tokens appear as their text unless skip_special. Throws
  // glm4::Error for an id outside [0, vocab_size()).
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special = false) const = 0;
  // One more than the largest id the tokenizer can produce (not the model's padded vocab).
  virtual int32_t vocab_size() const = 0;
  // Id of a special token: "[gMASK]", "<|user|>", "<|endoftext|>", "<sop>", ...; also "<s>",
  // "</s>", "<unk>" where they exist. ChatGLM2/3 name their start token "sop", not "<sop>".
  virtual std::optional<int32_t> special_id(std::string_view token) const = 0;
  virtual std::string_view kind() const = 0;  // "bpe-json", "tiktoken", "sentencepiece"
  // The bytes token `id` adds to generated text, unrepaired (a token may hold part of a UTF-8
  // character), or nullopt for a token that is not text (special, control, unknown). Constrained
  // decoding builds its vocabulary trie from these. The default decodes the token alone
  // (skipping specials), which is exact for tokens of whole characters.
  virtual std::optional<std::string> token_bytes(int32_t id) const;
};

// Loads the tokenizer of a model directory (see the top of this file). Throws glm4::Error naming
// the directory and the files looked for if there is none, or the file and line at fault.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& model_dir);

// Loaders for one file. tokenizer_config.json beside the file, when present, supplies special
// tokens (tiktoken) or tells ChatGLM2 from ChatGLM3 (sentencepiece).
std::unique_ptr<Tokenizer> load_tokenizer_json(const std::filesystem::path& file);
std::unique_ptr<Tokenizer> load_tiktoken(const std::filesystem::path& file);
std::unique_ptr<Tokenizer> load_sentencepiece(const std::filesystem::path& file);

// True if the file starts like a tiktoken rank file ("<base64> <rank>" lines).
bool looks_like_tiktoken(const std::filesystem::path& file);

}  // namespace glm4
