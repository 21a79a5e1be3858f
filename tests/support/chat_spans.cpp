#include "tests/support/chat_spans.h"

#include <span>

namespace glm4::testing {

std::string spans(const Tokenizer& tok, const RenderedChat& chat, const std::vector<uint8_t>& on) {
  std::string out, cur;
  for (size_t i = 0; i < chat.ids.size(); ++i) {
    if (on[i]) cur += tok.decode(std::span(&chat.ids[i], 1));
    if (!on[i] && !cur.empty()) out += "[" + cur + "]", cur.clear();
  }
  return cur.empty() ? out : out + "[" + cur + "]";
}

}  // namespace glm4::testing
