// The bit stream of affine_pack.h: packing byte by byte for every width; unpacking by whole
// bytes (2, 4, 8 bits) or whole packs of 3 or 5 bytes (3, 5, 6 bits).
#include "autograd/kernels/affine_pack.h"

#include <cstring>

namespace glm4 {

void pack_codes(int bits, const uint8_t* codes, int64_t count, uint8_t* packed) {
  uint64_t acc = 0;  // pending bits, lowest first
  int pending = 0;
  for (int64_t i = 0; i < count; ++i) {
    acc |= uint64_t(codes[i]) << pending;
    pending += bits;
    while (pending >= 8) {
      *packed++ = uint8_t(acc);
      acc >>= 8;
      pending -= 8;
    }
  }
}

void unpack_codes(int bits, const uint8_t* packed, int64_t first, int64_t count, uint8_t* codes) {
  const uint8_t* p = packed + first * bits / 8;
  switch (bits) {
    case 8:
      std::memcpy(codes, p, size_t(count));
      return;
    case 4:
      for (int64_t i = 0; i < count / 2; ++i) {
        codes[2 * i] = p[i] & 15;
        codes[2 * i + 1] = p[i] >> 4;
      }
      return;
    case 2:
      for (int64_t i = 0; i < count / 4; ++i)
        for (int j = 0; j < 4; ++j) codes[4 * i + j] = (p[i] >> (2 * j)) & 3;
      return;
  }
  // 3, 5 and 6 bits: whole packs of `per_pack` codes in `pack_bytes` bytes (8 in 3, 8 in 5, 4 in 3).
  const uint64_t mask = (1u << bits) - 1;
  const int pack_bytes = bits == 5 ? 5 : 3, per_pack = pack_bytes * 8 / bits;
  for (int64_t i = 0; i < count; i += per_pack, p += pack_bytes) {
    uint64_t v = 0;
    for (int b = 0; b < pack_bytes; ++b) v |= uint64_t(p[b]) << (8 * b);
    for (int k = 0; k < per_pack; ++k) codes[i + k] = uint8_t((v >> (bits * k)) & mask);
  }
}

}  // namespace glm4
