// attention_decode.h's kernel for builds with AVX2 and FMA but no AVX-512 (Zen 3 and older Intel
// desktops): the same tiles of 64 keys, register blocks and online softmax as the AVX-512 form in
// attention_decode.cpp, in 8 lanes and 16 registers: score blocks of 8 (row, key) dot products,
// value blocks of up to 4 rows x 16 dims. Dims past the last whole vector are read through a
// masked load (fp32) or a zero-padded copy (bf16).
#include "autograd/kernels/attention_decode.h"

#if defined(__AVX2__) && defined(__FMA__) && \
    !(defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__))

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "autograd/kernels/attention_decode_driver.h"
#include "autograd/kernels/simd.h"
#include "autograd/kernels/vec_math.h"
#include "base/check.h"

namespace glm4::kernels {
namespace {

constexpr int64_t kTile = 64;  // keys whose scores are held at once

// The first n of 8 lanes (n clamped to [0, 8]) for maskload / maskstore.
inline __m256i first_lanes(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(std::clamp<int64_t>(n, 0, 8))),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// 8 dims from p widened to fp32; the forms with n read the first n (< 8), the rest zero.
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 load8(const float* p, int64_t n) { return _mm256_maskload_ps(p, first_lanes(n)); }
inline __m256 load8(const uint16_t* p, int64_t n) {
  alignas(16) uint16_t padded[8] = {};
  std::memcpy(padded, p, size_t(n) * sizeof(uint16_t));
  return load8(padded);
}

// Lane i of the result: the sum of the lanes of a[i].
[[gnu::always_inline]] inline __m256 sum_lanes8(const __m256 (&a)[8]) {
  // hadd of hadds: lanes (0-3 of a0, of a1, of a2, of a3 | 4-7 of the same), likewise a4-a7
  const __m256 low = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 high = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(low, high, 0x20),
                       _mm256_permute2f128_ps(low, high, 0x31));
}

// The scores of HB query rows (q, d apart) and 8 / HB keys (k, stride apart) into s (rows kTile
// apart): each (row, key) dot product in a register across the dims, the 8 summed together.
template <int HB, typename K>
void score_block(const float* q, int64_t d, const K* k, int64_t stride, float* s) {
  constexpr int KB = 8 / HB;
  __m256 dot[8];
  for (__m256& x : dot) x = _mm256_setzero_ps();
  auto chunk = [&](int64_t c, auto... tail) {
    __m256 key[KB];
    for (int j = 0; j < KB; ++j) key[j] = load8(k + j * stride + c, tail...);
    for (int h = 0; h < HB; ++h) {
      const __m256 query = load8(q + h * d + c, tail...);
      for (int j = 0; j < KB; ++j)
        dot[h * KB + j] = _mm256_fmadd_ps(query, key[j], dot[h * KB + j]);
    }
  };
  int64_t c = 0;
  for (; c + 8 <= d; c += 8) chunk(c);
  if (c < d) chunk(c, d - c);
  alignas(32) float sums[8];
  _mm256_store_ps(sums, sum_lanes8(dot));
  for (int h = 0; h < HB; ++h) std::copy_n(sums + h * KB, KB, s + h * kTile);
}

// s[r * kTile + j] = q_r . key j for the tile's tk keys: rows HB at a time, keys 8 / HB at a
// time, the keys past the last whole block a dot product at a time.
template <typename K>
void scores(const float* q, int64_t rows, int64_t d, const K* k, int64_t stride, int64_t tk,
            float* s) {
  auto pass = [&](auto hb, int64_t r) {
    constexpr int HB = decltype(hb)::value, KB = 8 / HB;
    int64_t j = 0;
    for (; j + KB <= tk; j += KB)
      score_block<HB>(q + r * d, d, k + j * stride, stride, s + r * kTile + j);
    for (; j < tk; ++j)
      for (int h = 0; h < HB; ++h) {
        __m256 dot = _mm256_setzero_ps();
        int64_t c = 0;
        for (; c + 8 <= d; c += 8)
          dot = _mm256_fmadd_ps(load8(q + (r + h) * d + c), load8(k + j * stride + c), dot);
        if (c < d)
          dot = _mm256_fmadd_ps(load8(q + (r + h) * d + c, d - c), load8(k + j * stride + c, d - c),
                                dot);
        s[(r + h) * kTile + j] = simd::hsum(dot);
      }
  };
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) pass(std::integral_constant<int, 4>{}, r);
  for (; r + 2 <= rows; r += 2) pass(std::integral_constant<int, 2>{}, r);
  for (; r < rows; ++r) pass(std::integral_constant<int, 1>{}, r);
}

// acc[h][c] = alpha_h acc[h][c] + sum over the tile's keys j of p[h][j] value_j[c], for HB rows
// and DC vectors of dims from acc (rows dv apart); with Tail the last vector has only `last` dims.
template <int HB, int DC, bool Tail, typename K>
void value_block(const float* p, int64_t tk, const K* v, int64_t stride, const float* alpha,
                 float* acc, int64_t dv, int64_t last) {
  auto load = [&](const auto* from, int c) {
    return Tail && c == DC - 1 ? load8(from + c * 8, last) : load8(from + c * 8);
  };
  __m256 sum[HB][DC];
  for (int h = 0; h < HB; ++h)
    for (int c = 0; c < DC; ++c)
      sum[h][c] = _mm256_mul_ps(load(acc + h * dv, c), _mm256_set1_ps(alpha[h]));
  for (int64_t j = 0; j < tk; ++j) {
    __m256 value[DC];
    for (int c = 0; c < DC; ++c) value[c] = load(v + j * stride, c);
    for (int h = 0; h < HB; ++h) {
      const __m256 weight = _mm256_broadcast_ss(p + h * kTile + j);
      for (int c = 0; c < DC; ++c) sum[h][c] = _mm256_fmadd_ps(weight, value[c], sum[h][c]);
    }
  }
  for (int h = 0; h < HB; ++h)
    for (int c = 0; c < DC; ++c) {
      float* to = acc + h * dv + c * 8;
      if (Tail && c == DC - 1)
        _mm256_maskstore_ps(to, first_lanes(last), sum[h][c]);
      else
        _mm256_storeu_ps(to, sum[h][c]);
    }
}

template <int HB, typename K>
void value_rows(const float* p, int64_t tk, const K* v, int64_t stride, const float* alpha,
                float* acc, int64_t dv) {
  int64_t c = 0;
  for (; c + 16 <= dv; c += 16)
    value_block<HB, 2, false>(p, tk, v + c, stride, alpha, acc + c, dv, 8);
  for (; c + 8 <= dv; c += 8)
    value_block<HB, 1, false>(p, tk, v + c, stride, alpha, acc + c, dv, 8);
  if (c < dv) value_block<HB, 1, true>(p, tk, v + c, stride, alpha, acc + c, dv, dv - c);
}

// The instruction-set half of the kernel, for decode_driver.
struct Avx2 {
  static constexpr int64_t kTile = kernels::kTile;
  template <typename K>
  static void scores(const float* q, int64_t rows, int64_t d, const K* k, int64_t stride,
                     int64_t tk, float* s) {
    kernels::scores(q, rows, d, k, stride, tk, s);
  }
  template <int HB, typename K>
  static void value_rows(const float* p, int64_t tk, const K* v, int64_t stride, const float* alpha,
                         float* acc, int64_t dv) {
    kernels::value_rows<HB>(p, tk, v, stride, alpha, acc, dv);
  }
};

}  // namespace

bool attention_decode_available() { return true; }

void attention_decode_rows(const float* q, int64_t rows, const DecodeKeys& keys, int64_t lo,
                           int64_t hi, const DecodePart& out) {
  decode_driver::run<Avx2>(q, rows, keys, lo, hi, out);
}

}  // namespace glm4::kernels

#endif
