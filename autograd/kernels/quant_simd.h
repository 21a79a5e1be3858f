// AVX-512 pieces shared by the quantized decode kernels (quant_kernels_avx512.cpp,
// quant_decode_int8.cpp). Include it only inside a `#pragma GCC target` region that enables at
// least AVX-512 F and F16C, after <immintrin.h>: the definitions have internal linkage, so each
// kernel file gets its own copy, compiled for its own instruction set.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "autograd/kernels/quant_kernels.h"
#include "autograd/kernels/quantized_matrix.h"

namespace glm4::quant_detail {
namespace {

constexpr int64_t kParamBlock = 16;  // groups whose scales and biases are widened at once
// Software prefetch distance into the packed codes. Without it the kernels' work and the
// memory stalls added up (a 128000 x 1024 4-bit product: 0.117 ns a weight from memory vs 0.045
// in L2); 4 KiB ahead brought 0.068 (2 KiB and 8 KiB did no better).
constexpr int64_t kPrefetchBytes = 4096;

// Scales (or biases) of groups [g0, g0 + count) of row r widened to fp32, zero past count: inline
// for whole blocks of 16 (the call through convert_to_f32 was 14% of a 4-bit decode token).
inline __m512 widen_params16(const QuantizedMatrix& W, const void* params, int64_t r, int64_t g0,
                             int64_t count) {
  if (count != kParamBlock) {
    alignas(64) float tail[kParamBlock] = {};
    load_group_params(W, params, r, g0, count, tail);
    return _mm512_load_ps(tail);
  }
  const int64_t i = r * W.groups() + g0;
  if (W.scale_dtype == DType::F32) return _mm512_loadu_ps(static_cast<const float*>(params) + i);
  const __m256i h = _mm256_loadu_si256(
      reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(params) + i));
  return W.scale_dtype == DType::BF16
             ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
             : _mm512_cvtph_ps(h);
}

// A hint only: addresses past the end of the codes are fine.
inline void prefetch(const uint8_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
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
