// The bit stream of affine_pack.h: packing 8 codes into `bits` bytes at a time (byte by byte
// for a tail); unpacking by whole bytes (4, 8 bits) or 8 codes at a time (2, 3, 5, 6 bits).
#include "autograd/kernels/affine_pack.h"

#include <cstring>

// pdep is one fast instruction on Intel since Haswell and AMD since Zen 3, microcode on Zen 1/2.
#if defined(__BMI2__) && !defined(__znver1__) && !defined(__znver2__)
#define GLM4_FAST_PDEP 1
#include <immintrin.h>
#endif

namespace glm4 {

namespace {

// Codes [0, count) as a stream, byte by byte: the general case and the tails.
void pack_serial(int bits, const uint8_t* codes, int64_t count, uint8_t* packed) {
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

// 8 codes into kBits bytes at a time; returns how many codes it packed.
template <int kBits>
int64_t pack_eights(const uint8_t* codes, int64_t count, uint8_t* packed) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8, packed += kBits) {
    uint64_t v = 0;
    for (int k = 0; k < 8; ++k) v |= uint64_t(codes[i + k]) << (kBits * k);
    for (int b = 0; b < kBits; ++b) packed[b] = uint8_t(v >> (8 * b));
  }
  return i;
}

}  // namespace

void pack_codes(int bits, const uint8_t* codes, int64_t count, uint8_t* packed) {
  int64_t done = 0;
  switch (bits) {
    case 2:
      done = pack_eights<2>(codes, count, packed);
      break;
    case 3:
      done = pack_eights<3>(codes, count, packed);
      break;
    case 4:
      done = pack_eights<4>(codes, count, packed);
      break;
    case 5:
      done = pack_eights<5>(codes, count, packed);
      break;
    case 6:
      done = pack_eights<6>(codes, count, packed);
      break;
    case 8:
      std::memcpy(packed, codes, size_t(count));
      return;
  }
  pack_serial(bits, codes + done, count - done, packed + done * bits / 8);
}

namespace {

// 8 codes at a time from kBits bytes (2, 3, 5 or 6): with BMI2, one pdep spreads the 8 fields into
// the low bits of 8 bytes; without, shifts and masks, unrolled as the width is a constant.
template <int kBits>
void unpack_packs(const uint8_t* p, int64_t count, uint8_t* codes) {
  constexpr uint64_t kMask = (1u << kBits) - 1;
  for (int64_t i = 0; i < count; i += 8, p += kBits) {
    uint64_t v = 0;
    for (int b = 0; b < kBits; ++b) v |= uint64_t(p[b]) << (8 * b);
#if defined(GLM4_FAST_PDEP)
    const uint64_t spread = _pdep_u64(v, kMask * 0x0101010101010101ull);
    std::memcpy(codes + i, &spread, 8);
#else
    for (int k = 0; k < 8; ++k) codes[i + k] = uint8_t((v >> (kBits * k)) & kMask);
#endif
  }
}

}  // namespace

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
      return unpack_packs<2>(p, count, codes);
    case 3:
      return unpack_packs<3>(p, count, codes);
    case 5:
      return unpack_packs<5>(p, count, codes);
    case 6:
      return unpack_packs<6>(p, count, codes);
  }
}

}  // namespace glm4
