// AVX2 pieces shared by the AVX2 quantized kernels (quant_kernels_avx2.cpp,
// quant_decode_int8_avx2.cpp). Include it only inside a `#pragma GCC target` region that enables
// at least AVX2, after <immintrin.h>: the definitions have internal linkage, so each kernel file
// gets its own copy, compiled for its own instruction set.
#pragma once
#include <immintrin.h>

namespace glm4::quant_detail {
namespace {

// The sum of v's 8 lanes.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace
}  // namespace glm4::quant_detail
