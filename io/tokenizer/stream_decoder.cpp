// The decoder works through Tokenizer::decode alone. It relies on decode being prefix-stable: if
// decode(S) does not end in U+FFFD, decode(S + T) starts with decode(S); a trailing U+FFFD may be
// a character still being completed, so it is held back. To keep each push O(1), the window is
// cut back to a short context once its text is final. A context must decode on its own to
// non-empty, final text that ends the stream's text: then the ids after it decode as in the whole
// stream (byte-level: decoding is concatenative at character boundaries; sentencepiece: the
// context holds a piece that consumed the run's leading-space strip, or starts a new run).
#include "io/tokenizer/stream_decoder.h"

#include <algorithm>

#include "io/tokenizer/utf8.h"

namespace glm4 {
namespace {

constexpr size_t kCommitAfter = 8;  // ids since the context before trying to cut the window
constexpr size_t kMaxContext = 8;   // context lengths tried
constexpr size_t kTailBytes = 256;  // how much emitted text is kept to validate a context

// Length of text without its trailing run of U+FFFD.
size_t stable_length(const std::string& text) {
  size_t n = text.size();
  while (n >= 3 && std::string_view(text).substr(n - 3, 3) == utf8::kReplacement) n -= 3;
  return n;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string StreamDecoder::push(int32_t id) {
  window_.push_back(id);
  text_ = tokenizer_.decode(window_, skip_special_);
  const size_t stable = stable_length(text_);
  std::string out;
  if (stable > emitted_) {
    out = text_.substr(emitted_, stable - emitted_);
    emitted_ = stable;
    tail_ += out;
    if (tail_.size() > 2 * kTailBytes) tail_.erase(0, tail_.size() - kTailBytes);
  }
  if (stable == text_.size() && window_.size() - context_ >= kCommitAfter) try_commit();
  return out;
}

void StreamDecoder::try_commit() {
  for (size_t k = 1; k <= kMaxContext && k < window_.size(); ++k) {
    const std::vector<int32_t> context(window_.end() - k, window_.end());
    std::string text = tokenizer_.decode(context, skip_special_);
    if (text.empty() || text.size() > kTailBytes || stable_length(text) != text.size()) continue;
    if (!ends_with(tail_, text)) continue;
    window_ = context;
    context_ = k;
    text_ = std::move(text);
    emitted_ = text_.size();
    return;
  }
}

std::string StreamDecoder::flush() {
  std::string out = emitted_ < text_.size() ? text_.substr(emitted_) : std::string();
  window_.clear();
  context_ = 0;
  text_.clear();
  emitted_ = 0;
  tail_.clear();
  return out;
}

}  // namespace glm4
