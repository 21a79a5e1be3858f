// After a fuzzed tokenizer file loaded: encode and decode with it, since a hostile vocabulary or
// merge list can break those too.
#pragma once
#include <cstdint>
#include <vector>

#include "io/tokenizer/tokenizer.h"

namespace glm4::fuzz {

inline void exercise_tokenizer(const Tokenizer& tok) {
  for (const char* text : {"Hello, world! 你好 123", "<|user|>\nhi<|assistant|>", "  \n\t x"}) {
    const std::vector<int32_t> ids = tok.encode(text, true);
    (void)tok.decode(ids);
    (void)tok.encode(text, false);
  }
  std::vector<int32_t> all;
  for (int32_t i = 0; i < tok.vocab_size() && i < 4096; ++i) all.push_back(i);
  (void)tok.decode(all);
  (void)tok.decode(all, true);
  (void)tok.special_id("<|endoftext|>");
}

}  // namespace glm4::fuzz
