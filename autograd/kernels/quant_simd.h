// AVX-512 pieces shared by the quantized decode kernels (quant_kernels_avx512.cpp,
// quant_decode_int8.cpp). Include it only inside a `#pragma GCC target` region that enables at
// least AVX-512 F and F16C, after <immintrin.h>: the definitions have internal linkage, so each
// kernel file gets its own copy, compiled for its own instruction set.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "autograd/kernels/quant_kernels.h"
#include "autograd/kernels/quantized_matrix.h"

namespace glm4::quant_detail {
namespace {

// acc + the products of u8's unsigned bytes with s8's signed bytes, four to a 32-bit lane
// (vpdpbusd). Written as inline asm because GCC 12 moves the accumulator to another register and
// back around every _mm512_dpbusd_epi32 in a loop: two extra instructions for each product in
// the GEMM's inner loop, which then ran at about 60% of vpdpbusd's rate.
inline __m512i dpbusd(__m512i acc, __m512i u8, __m512i s8) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(s8));
  return acc;
}

// The first n of 16 lanes: none for n <= 0, all for n >= 16.
inline __mmask16 first_lanes(int64_t n) {
  return __mmask16((1u << std::clamp<int64_t>(n, 0, 16)) - 1u);
}

constexpr int64_t kParamBlock = 16;  // groups whose scales and biases are widened at once

// Scales (or biases) of groups [g0, g0 + count) of row r widened to fp32, zero past count: one
// masked load inline (the call through convert_to_f32 was 14% of a 4-bit decode token, and 4% of
// GLM-4.7-Flash's for the last 8 of a 1536-wide down_proj's 24 groups), except for an odd count
// of 16-bit values. `groups` is W.groups(), passed in: its division cost a decode step as much as
// its products.
inline __m512 widen_params16(const QuantizedMatrix& W, const void* params, int64_t r, int64_t g0,
                             int64_t count, int64_t groups) {
  const int64_t i = r * groups + g0;
  const bool wide = W.scale_dtype == DType::F32;
  if (count != kParamBlock && !wide && count % 2 != 0) {
    alignas(64) float tail[kParamBlock] = {};
    load_group_params(W, params, r, g0, count, tail);
    return _mm512_load_ps(tail);
  }
  const auto lanes = __mmask16((1u << (wide ? count : count / 2)) - 1u);
  if (wide) return _mm512_maskz_loadu_ps(lanes, static_cast<const float*>(params) + i);
  const __m256i h = _mm512_castsi512_si256(
      _mm512_maskz_loadu_epi32(lanes, static_cast<const uint16_t*>(params) + i));
  return W.scale_dtype == DType::BF16
             ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
             : _mm512_cvtph_ps(h);
}

// 64 bytes of codes from p, zero past `valid` bytes (masked: never reads past them). Needs
// AVX512BW in the including region (the int8 kernels; quant_kernels_avx512.cpp does not call it).
inline __m512i load_codes(const uint8_t* p, int64_t valid) {
  if (valid >= 64) return _mm512_loadu_si512(p);
  return _mm512_maskz_loadu_epi8(__mmask64((uint64_t(1) << valid) - 1), p);
}

// A hint only: addresses past the end of the codes are fine.
inline void prefetch(const uint8_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
}

// Y[m * ldy + n + r] (+)= the sum of acc[r][m]'s lanes.
template <int M, int R>
void emit_sums(const __m512 (&acc)[R][M], int64_t n, float* Y, int64_t ldy, bool accumulate) {
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) {
      const float s = _mm512_reduce_add_ps(acc[r][m]);
      float& y = Y[m * ldy + n + r];
      y = accumulate ? y + s : s;
    }
}

}  // namespace
}  // namespace glm4::quant_detail
