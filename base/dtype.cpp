#include "base/dtype.h"

#include <cmath>

namespace glm4 {

bool parse_dtype(std::string_view s, DType* out) {
  if (s == "F32" || s == "f32" || s == "float32") {
    *out = DType::F32;
    return true;
  }
  if (s == "BF16" || s == "bf16" || s == "bfloat16") {
    *out = DType::BF16;
    return true;
  }
  if (s == "F16" || s == "f16" || s == "float16") {
    *out = DType::F16;
    return true;
  }
  return false;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      u = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | man << 13;
  } else {
    u = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // overflow (>= 65520) -> inf
  if (abs < 0x38800000u) {                        // result is subnormal or zero
    if (abs < 0x33000000u) return sign;           // < 2^-25 rounds to 0
    uint32_t e = abs >> 23;
    uint32_t man = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // 14 + (113 - e) - 1 ... bits to drop
    uint32_t half = 1u << (shift - 1);
    uint32_t rest = man & ((1u << shift) - 1);
    uint32_t r = man >> shift;
    if (rest > half || (rest == half && (r & 1u))) ++r;
    return sign | uint16_t(r);
  }
  uint32_t r = abs + 0xfffu + ((abs >> 13) & 1u) - 0x38000000u;  // rebias and round to even
  return sign | uint16_t(r >> 13);
}

}  // namespace glm4
