// UTF-8 decoding, repair of ill-formed bytes, and the Unicode classes (\p{L}, \p{N}, \s) that the
// GLM-4 pre-tokenizer needs. Tables come from unicode_tables.cpp (generated).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace glm4::utf8 {

inline constexpr uint32_t kInvalid = 0xFFFFFFFFu;                 // returned for ill-formed bytes
inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Decodes the code point starting at s[i] (i < s.size()) and stores its byte length in *len.
// Ill-formed input yields kInvalid with *len = the length of the maximal subpart (>= 1), the unit
// that Unicode (and Python's / Rust's lossy decoders) replace by one U+FFFD.
uint32_t decode(std::string_view s, size_t i, int* len);

void append(std::string& out, uint32_t cp);

bool is_valid(std::string_view s);

// Replaces every maximal ill-formed subpart by U+FFFD (Python errors="replace", Rust
// from_utf8_lossy).
std::string repair(std::string_view bytes);

enum class CharClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

// kLetter: General_Category L*; kNumber: N*; kSpace: White_Space; kOther: everything else
// (including kInvalid).
CharClass char_class(uint32_t cp);

}  // namespace glm4::utf8
