// The bit stream of affine_pack.h: a byte-serial loop for every width, with direct paths for
// 2, 4 and 8 bits (whole codes per byte).
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
  const uint32_t mask = (1u << bits) - 1;
  uint64_t acc = 0;
  int avail = 0;
  for (int64_t i = 0; i < count; ++i) {
    while (avail < bits) {
      acc |= uint64_t(*p++) << avail;
      avail += 8;
    }
    codes[i] = uint8_t(acc & mask);
    acc >>= bits;
    avail -= bits;
  }
}

}  // namespace glm4
