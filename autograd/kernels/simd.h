// Internal to the GEMM kernels: one fp32 vector type for the build's instruction set (AVX-512,
// AVX2+FMA, or a scalar fallback) with loads that widen bf16 / f16 elements on the way in.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__) || defined(__AVX2__)
// GCC 12 flags the self-initialised "undefined" vectors inside its own intrinsics when inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#include "base/dtype.h"

namespace glm4::simd {

#if defined(__AVX512F__)
constexpr int kLanes = 16;
using VecF = __m512;
inline VecF zero() { return _mm512_setzero_ps(); }
inline VecF set1(float a) { return _mm512_set1_ps(a); }
inline VecF load(const float* p) { return _mm512_loadu_ps(p); }
inline VecF load(const uint16_t* p, DType t) {
  __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if (t == DType::F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline void store(float* p, VecF v) { _mm512_storeu_ps(p, v); }
inline VecF fma(VecF a, VecF b, VecF c) { return _mm512_fmadd_ps(a, b, c); }
inline VecF add(VecF a, VecF b) { return _mm512_add_ps(a, b); }
inline VecF sub(VecF a, VecF b) { return _mm512_sub_ps(a, b); }
inline VecF mul(VecF a, VecF b) { return _mm512_mul_ps(a, b); }
inline VecF div(VecF a, VecF b) { return _mm512_div_ps(a, b); }
inline VecF max(VecF a, VecF b) { return _mm512_max_ps(a, b); }
inline float hsum(VecF v) { return _mm512_reduce_add_ps(v); }
inline float hmax(VecF v) { return _mm512_reduce_max_ps(v); }

#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
constexpr int kLanes = 8;
using VecF = __m256;
inline VecF zero() { return _mm256_setzero_ps(); }
inline VecF set1(float a) { return _mm256_set1_ps(a); }
inline VecF load(const float* p) { return _mm256_loadu_ps(p); }
inline VecF load(const uint16_t* p, DType t) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (t == DType::F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline void store(float* p, VecF v) { _mm256_storeu_ps(p, v); }
inline VecF fma(VecF a, VecF b, VecF c) { return _mm256_fmadd_ps(a, b, c); }
inline VecF add(VecF a, VecF b) { return _mm256_add_ps(a, b); }
inline VecF sub(VecF a, VecF b) { return _mm256_sub_ps(a, b); }
inline VecF mul(VecF a, VecF b) { return _mm256_mul_ps(a, b); }
inline VecF div(VecF a, VecF b) { return _mm256_div_ps(a, b); }
inline VecF max(VecF a, VecF b) { return _mm256_max_ps(a, b); }
inline float hmax(VecF v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}
inline float hsum(VecF v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

#else
constexpr int kLanes = 1;
using VecF = float;
inline VecF zero() { return 0.0f; }
inline VecF set1(float a) { return a; }
inline VecF load(const float* p) { return *p; }
inline VecF load(const uint16_t* p, DType t) {
  return t == DType::F16 ? f16_to_f32(*p) : bf16_to_f32(*p);
}
inline void store(float* p, VecF v) { *p = v; }
inline VecF fma(VecF a, VecF b, VecF c) { return a * b + c; }
inline VecF add(VecF a, VecF b) { return a + b; }
inline VecF sub(VecF a, VecF b) { return a - b; }
inline VecF mul(VecF a, VecF b) { return a * b; }
inline VecF div(VecF a, VecF b) { return a / b; }
inline VecF max(VecF a, VecF b) { return a > b ? a : b; }
inline float hsum(VecF v) { return v; }
inline float hmax(VecF v) { return v; }
#endif

// One element widened to fp32 (for tails).
inline float widen(const uint16_t* p, DType t) {
  return t == DType::F16 ? f16_to_f32(*p) : bf16_to_f32(*p);
}

}  // namespace glm4::simd
