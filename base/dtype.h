// Storage formats of frozen weights and checkpoint tensors, and exact conversions to fp32.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace glm4 {

enum class DType : uint8_t { F32, BF16, F16 };

inline size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 2; }
inline const char* dtype_name(DType t) {  // safetensors spelling
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::BF16:
      return "BF16";
    case DType::F16:
      return "F16";
  }
  return "?";
}
// Parses "F32" / "BF16" / "F16" (safetensors) or "f32" / "bf16" / "f16" (flags); false otherwise.
bool parse_dtype(std::string_view s, DType* out);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // round to nearest even, overflow to inf

}  // namespace glm4
