// Streaming detokenization: text is returned as soon as it is final, never half a UTF-8 character,
// and everything returned by push() and flush() concatenates to exactly decode(all ids).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/tokenizer/tokenizer.h"

namespace glm4 {

class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);
  std::string push(int32_t id);
  // Returns what is still held back (a trailing incomplete character comes out as U+FFFD, as
  // decode gives it) and starts a new stream.
  std::string flush();

 private:
  void try_commit();

  const Tokenizer& tokenizer_;
  bool skip_special_;
  // Context ids (already emitted, kept so the next ids decode as they would in the whole stream)
  // followed by the ids since; text_ = decode(window_), of which emitted_ bytes are out.
  std::vector<int32_t> window_;
  size_t context_ = 0;
  std::string text_;
  size_t emitted_ = 0;
  std::string tail_;  // the last bytes of the stream's text, to validate a new context
};

}  // namespace glm4
