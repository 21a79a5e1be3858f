// The Tokenizer over ByteBpe + the GLM-4 pre-tokenizer + special tokens; tiktoken rank files and
// tokenizer.json files both load into it and differ only in kind().
#pragma once
#include "io/tokenizer/byte_bpe.h"
#include "io/tokenizer/special_tokens.h"
#include "io/tokenizer/tokenizer.h"

namespace glm4 {

class ByteLevelTokenizer final : public Tokenizer {
 public:
  // specials: matched only when allow_special, dropped by skip_special. plain_added: added tokens
  // that are not special (tokenizer.json "special": false): always matched, never skipped.
  ByteLevelTokenizer(ByteBpe bpe, SpecialTokens specials, SpecialTokens plain_added,
                     std::string kind);

  std::vector<int32_t> encode(std::string_view text, bool allow_special) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> special_id(std::string_view token) const override;
  std::string_view kind() const override { return kind_; }
  std::optional<std::string> token_bytes(int32_t id) const override;

 private:
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const;

  ByteBpe bpe_;
  SpecialTokens specials_, plain_added_, all_added_;
  std::string kind_;
  int32_t vocab_size_ = 0;
};

}  // namespace glm4
