// Encoding: split at added tokens, pre-tokenize, BPE each piece. Decoding: concatenate token bytes,
// then repair ill-formed UTF-8 (as tiktoken's errors="replace" and HF's ByteLevel decoder do).
#include "io/tokenizer/byte_level_tokenizer.h"

#include <algorithm>

#include "base/check.h"
#include "io/tokenizer/pretokenizer.h"
#include "io/tokenizer/utf8.h"

namespace glm4 {

ByteLevelTokenizer::ByteLevelTokenizer(ByteBpe bpe, SpecialTokens specials,
                                       SpecialTokens plain_added, std::string kind)
    : bpe_(std::move(bpe)),
      specials_(std::move(specials)),
      plain_added_(std::move(plain_added)),
      kind_(std::move(kind)) {
  vocab_size_ = bpe_.id_limit();
  for (const SpecialTokens* set : {&specials_, &plain_added_}) {
    for (int32_t id : set->ids()) {
      // An added token may also sit in the BPE vocabulary, but only with the same text.
      GLM4_CHECK(!bpe_.has_id(id) || bpe_.bytes_of(id) == *set->text_of(id), kind_,
                 ": added token '", *set->text_of(id), "' reuses the id ", id,
                 " of a different BPE token");
      all_added_.add(*set->text_of(id), id, kind_);
      vocab_size_ = std::max(vocab_size_, id + 1);
    }
  }
}

void ByteLevelTokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& out) const {
  pretokenize_glm4(text, [&](std::string_view piece) { bpe_.encode_piece(piece, out); });
}

std::vector<int32_t> ByteLevelTokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  const SpecialTokens& matcher = allow_special ? all_added_ : plain_added_;
  if (matcher.empty()) {
    encode_ordinary(text, out);
  } else {
    matcher.split(
        text, [&](std::string_view t) { encode_ordinary(t, out); },
        [&](int32_t id) { out.push_back(id); });
  }
  return out;
}

std::string ByteLevelTokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (const int32_t id : ids) {
    if (const std::string* s = specials_.text_of(id)) {
      if (!skip_special) bytes += *s;
    } else if (bpe_.has_id(id)) {
      bytes += bpe_.bytes_of(id);
    } else if (const std::string* a = plain_added_.text_of(id)) {
      bytes += *a;
    } else {
      fail(kind_, " tokenizer: cannot decode token id ", id, " (vocab size ", vocab_size_, ")");
    }
  }
  return utf8::repair(bytes);
}

std::optional<std::string> ByteLevelTokenizer::token_bytes(int32_t id) const {
  if (specials_.text_of(id)) return std::nullopt;
  if (bpe_.has_id(id)) return bpe_.bytes_of(id);
  if (const std::string* a = plain_added_.text_of(id)) return *a;
  return std::nullopt;
}

std::optional<int32_t> ByteLevelTokenizer::special_id(std::string_view token) const {
  return specials_.id_of(token);
}

}  // namespace glm4
