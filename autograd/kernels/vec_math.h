// Vectorised row math for the fused kernels (softmax, cross-entropy, attention, SiLU) in the
// build's vector width (simd.h): max, scaling and exp of a row. The exp: exp(x) = 2^n * exp(r) with
// n = round(x / ln 2) and |r| <= ln2 / 2, exp(r) by its Taylor series to r^7 (the first term
// dropped is below 6e-9 of the result, a tenth of an fp32 ulp). Within 2 ulp of std::exp; 0 where
// exp underflows (x < -87.3), +inf where it overflows, NaN stays NaN. The ops' composed references
// keep std::exp.
#pragma once
#include <cmath>
#include <cstdint>

#include "autograd/kernels/simd.h"

namespace glm4::simd {

// One element with the same edges (tails of vector loops, the scalar build).
inline float exp1(float x) { return x < -87.33654f ? 0.0f : std::exp(x); }

#if defined(__AVX512F__)
inline VecF exp(VecF x) {
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
  const __m512 ln2_hi = _mm512_set1_ps(0.693145751953125f),
               ln2_lo = _mm512_set1_ps(1.428606765330187e-06f);
  const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654f), _CMP_LT_OQ);
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
  r = _mm512_fnmadd_ps(n, ln2_lo, r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_mov_ps(~under, _mm512_scalef_ps(p, n));  // scalef: overflow to inf, NaN kept
}
#elif defined(__AVX2__) && defined(__FMA__)
inline VecF exp(VecF x) {
  const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
  const __m256 ln2_hi = _mm256_set1_ps(0.693145751953125f),
               ln2_lo = _mm256_set1_ps(1.428606765330187e-06f);
  const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33654f), _CMP_LT_OQ);
  const __m256 over = _mm256_cmp_ps(x, _mm256_set1_ps(88.72283f), _CMP_GT_OQ);
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const __m256 xc =
      _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.33654f)), _mm256_set1_ps(88.72283f));
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(xc, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, ln2_hi, xc);
  r = _mm256_fnmadd_ps(n, ln2_lo, r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // 2^n in two halves, so n = 128 (x near 88.7) does not overflow the exponent field.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(ni, 1);
  const __m256 s1 =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
  const __m256 s2 = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), _mm256_set1_epi32(127)), 23));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(), under);
  y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), over);
  return _mm256_blendv_ps(y, x, nan);
}
#else
inline VecF exp(VecF x) { return exp1(x); }
#endif

}  // namespace glm4::simd

namespace glm4::kernels {

// out[i] = exp(x[i] - shift) for i < n (out may be x); returns the sum of out, in double.
double exp_shifted(const float* x, float shift, float* out, int64_t n);
// max of x[0..n), -inf for n = 0 (NaN when some x is NaN is not promised).
float max_of(const float* x, int64_t n);
// x[i] *= c.
void scale_in_place(float* x, int64_t n, float c);
// out[i] = 1 / (1 + exp(-x[i])) (out may be x).
void sigmoid(const float* x, float* out, int64_t n);

}  // namespace glm4::kernels
