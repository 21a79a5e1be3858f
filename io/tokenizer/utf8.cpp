// UTF-8 decoding per Unicode Table 3-7 and table-driven character classes.
#include "io/tokenizer/utf8.h"

#include <algorithm>
#include <array>
#include <memory>

#include "io/tokenizer/unicode_tables.h"

namespace glm4::utf8 {
namespace {

// Valid range of the second byte for each lead byte (Table 3-7); later bytes are 80..BF.
bool second_byte_ok(uint8_t lead, uint8_t b) {
  switch (lead) {
    case 0xE0:
      return b >= 0xA0 && b <= 0xBF;
    case 0xED:
      return b >= 0x80 && b <= 0x9F;
    case 0xF0:
      return b >= 0x90 && b <= 0xBF;
    case 0xF4:
      return b >= 0x80 && b <= 0x8F;
    default:
      return b >= 0x80 && b <= 0xBF;
  }
}

int sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;  // 80..C1, F5..FF never start a sequence
}

bool in_ranges(const unicode_tables::CodeRange* r, size_t n, uint32_t cp) {
  const auto* end = r + n;
  const auto* it = std::upper_bound(
      r, end, cp, [](uint32_t v, const unicode_tables::CodeRange& x) { return v < x.lo; });
  return it != r && cp <= (it - 1)->hi;
}

CharClass lookup(uint32_t cp) {
  using namespace unicode_tables;
  if (in_ranges(kLetter, kLetterCount, cp)) return CharClass::kLetter;
  if (in_ranges(kNumber, kNumberCount, cp)) return CharClass::kNumber;
  if (in_ranges(kWhiteSpace, kWhiteSpaceCount, cp)) return CharClass::kSpace;
  return CharClass::kOther;
}

// Classes of the Basic Multilingual Plane, built once (thread-safe static initialisation).
const std::array<CharClass, 0x10000>& bmp_classes() {
  static const std::unique_ptr<std::array<CharClass, 0x10000>> table = [] {
    auto t = std::make_unique<std::array<CharClass, 0x10000>>();
    for (uint32_t cp = 0; cp < 0x10000; ++cp) (*t)[cp] = lookup(cp);
    return t;
  }();
  return *table;
}

}  // namespace

uint32_t decode(std::string_view s, size_t i, int* len) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  const uint8_t lead = p[i];
  const int need = sequence_length(lead);
  if (need == 1) {
    *len = 1;
    return lead;
  }
  if (need == 0) {
    *len = 1;
    return kInvalid;
  }
  uint32_t cp = lead & (0xFF >> (need + 1));
  for (int k = 1; k < need; ++k) {
    const bool ok = i + k < n && (k == 1 ? second_byte_ok(lead, p[i + k])
                                         : (p[i + k] >= 0x80 && p[i + k] <= 0xBF));
    if (!ok) {
      *len = k;
      return kInvalid;
    }  // maximal subpart: the valid prefix so far
    cp = (cp << 6) | (p[i + k] & 0x3F);
  }
  *len = need;
  return cp;
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

bool is_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    int len = 0;
    if (decode(s, i, &len) == kInvalid) return false;
    i += len;
  }
  return true;
}

std::string repair(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0, clean_from = 0;
  while (i < bytes.size()) {
    if (static_cast<uint8_t>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    if (decode(bytes, i, &len) == kInvalid) {
      out.append(bytes.substr(clean_from, i - clean_from));
      out.append(kReplacement);
      clean_from = i + len;
    }
    i += len;
  }
  out.append(bytes.substr(clean_from));
  return out;
}

CharClass char_class(uint32_t cp) {
  if (cp < 0x10000) return bmp_classes()[cp];
  if (cp > 0x10FFFF) return CharClass::kOther;
  return lookup(cp);
}

}  // namespace glm4::utf8
