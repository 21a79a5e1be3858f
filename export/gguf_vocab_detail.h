// Internals of the GGUF vocabulary export: one filler per tokenizer file format.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "export/gguf_vocab.h"

namespace glm4::gguf_vocab_detail {

// An entry of tokenizer.json's added_tokens.
struct AddedToken {
  int32_t id;
  std::string content;
  bool special;
};

// transformers' does_token_look_special as the converter applies it: <|...|>, <pad>, <mask>, ...
bool looks_special(std::string_view token);

// Each fills tokens, types (and scores or merges), model and pre of `v`, padded to vocab_size.
void fill_from_tokenizer_json(const std::filesystem::path& file, int64_t vocab_size, GgufVocab& v,
                              std::vector<AddedToken>* added);
void fill_from_tiktoken(const std::filesystem::path& file, int64_t vocab_size, GgufVocab& v);
void fill_from_sentencepiece(const std::filesystem::path& file, int64_t vocab_size, GgufVocab& v);

// Appends "[PAD{id}]" tokens of type unused (score `score` when scores are kept) up to vocab_size;
// throws naming `source` when the tokenizer already has more tokens than that.
void pad_to(GgufVocab& v, int64_t vocab_size, const std::string& source, float score);

}  // namespace glm4::gguf_vocab_detail
