// GPT-2's byte-level alphabet (bytes_to_unicode): printable bytes stand for themselves, the other
// 68 map to U+0100 onwards. tokenizer.json vocabularies and GGUF "gpt2" token lists use it.
#pragma once
#include <array>
#include <cstdint>

namespace glm4 {

inline std::array<uint32_t, 256> byte_to_unicode() {
  std::array<uint32_t, 256> map{};
  uint32_t extra = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    map[b] = printable ? b : extra++;
  }
  return map;
}

}  // namespace glm4
