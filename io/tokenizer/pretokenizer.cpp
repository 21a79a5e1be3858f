// Hand-coded matcher for kGlm4PretokenizerRegex. At each position the seven alternatives are tried
// in order, as a backtracking engine would, and the first that matches gives the piece:
//   1 (?i:'s|'t|'re|'ve|'m|'ll|'d)   2 [^\r\n\p{L}\p{N}]?\p{L}+   3 \p{N}{1,3}
//   4 ' ?[^\s\p{L}\p{N}]+[\r\n]*'    5 \s*[\r\n]+                 6 \s+(?!\S)    7 \s+
#include "io/tokenizer/pretokenizer.h"

#include <cstdint>

#include "base/check.h"
#include "io/tokenizer/utf8.h"

namespace glm4 {
namespace {

using utf8::CharClass;

struct Chars {
  std::vector<uint32_t> cp;
  std::vector<CharClass> cls;
  std::vector<uint32_t> off;  // byte offset of each char, plus the end

  explicit Chars(std::string_view text) {
    GLM4_CHECK(text.size() < (size_t(1) << 32), "pre-tokenizer: text of ", text.size(),
               " bytes is too long (limit 4 GiB)");
    cp.reserve(text.size());
    cls.reserve(text.size());
    off.reserve(text.size() + 1);
    for (size_t i = 0; i < text.size();) {
      int len = 1;
      const uint32_t c = utf8::decode(text, i, &len);
      cp.push_back(c);
      cls.push_back(utf8::char_class(c));
      off.push_back(uint32_t(i));
      i += len;
    }
    off.push_back(uint32_t(text.size()));
  }
  size_t size() const { return cp.size(); }
  bool letter(size_t i) const { return cls[i] == CharClass::kLetter; }
  bool number(size_t i) const { return cls[i] == CharClass::kNumber; }
  bool space(size_t i) const { return cls[i] == CharClass::kSpace; }
  bool newline(size_t i) const { return cp[i] == '\r' || cp[i] == '\n'; }
  bool other(size_t i) const { return cls[i] == CharClass::kOther; }  // [^\s\p{L}\p{N}]
};

// Simple case folding of the letters in alternative 1: ASCII, plus U+017F LATIN SMALL LETTER
// LONG S, which folds to 's' under (?i) in the Rust, Oniguruma and Python regex engines.
uint32_t fold(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c == 0x17F) return 's';
  return c;
}

size_t match_contraction(const Chars& s, size_t i) {
  const size_t n = s.size();
  if (s.cp[i] != '\'' || i + 1 >= n) return 0;
  const uint32_t a = fold(s.cp[i + 1]);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= n) return 0;
  const uint32_t b = fold(s.cp[i + 2]);
  if ((a == 'r' || a == 'v') && b == 'e') return 3;
  if (a == 'l' && b == 'l') return 3;
  return 0;
}

// Length in chars of the piece starting at char i (always >= 1).
size_t match_at(const Chars& s, size_t i) {
  const size_t n = s.size();
  auto run = [&](size_t j, auto pred) {
    while (j < n && pred(j)) ++j;
    return j;
  };
  auto is_letter = [&](size_t k) { return s.letter(k); };
  auto is_other = [&](size_t k) { return s.other(k); };
  auto is_newline = [&](size_t k) { return s.newline(k); };

  if (size_t len = match_contraction(s, i)) return len;
  if (s.letter(i)) return run(i, is_letter) - i;
  if (!s.newline(i) && !s.number(i) && i + 1 < n && s.letter(i + 1)) {
    return run(i + 1, is_letter) - i;
  }
  if (s.number(i)) {
    size_t j = i + 1;
    while (j < n && j < i + 3 && s.number(j)) ++j;
    return j - i;
  }
  if (s.other(i) || (s.cp[i] == ' ' && i + 1 < n && s.other(i + 1))) {
    const size_t j = run(s.cp[i] == ' ' ? i + 1 : i, is_other);
    return run(j, is_newline) - i;
  }
  // s[i] is whitespace.
  const size_t end = run(i, [&](size_t k) { return s.space(k); });
  for (size_t k = end; k > i; --k) {  // 5: up to and including the last \r or \n of the run
    if (s.newline(k - 1)) return k - i;
  }
  if (end == n) return end - i;         // 6: the run reaches the end of the text
  if (end - 1 > i) return end - 1 - i;  // 6: leave the last space to the next piece
  return end - i;                       // 7
}

}  // namespace

void pretokenize_glm4(std::string_view text, const std::function<void(std::string_view)>& fn) {
  const Chars s(text);
  for (size_t i = 0; i < s.size();) {
    const size_t len = match_at(s, i);
    fn(text.substr(s.off[i], s.off[i + len] - s.off[i]));
    i += len;
  }
}

std::vector<std::string_view> pretokenize_glm4(std::string_view text) {
  std::vector<std::string_view> out;
  pretokenize_glm4(text, [&](std::string_view piece) { out.push_back(piece); });
  return out;
}

}  // namespace glm4
