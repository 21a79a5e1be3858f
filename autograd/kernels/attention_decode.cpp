#include "autograd/kernels/attention_decode.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "autograd/kernels/attention_decode_driver.h"
#include "autograd/kernels/simd.h"
#include "autograd/kernels/vec_math.h"
#include "base/check.h"

namespace glm4::kernels {

void join_decode_parts(const DecodePart* parts, int64_t count, int64_t rows, int64_t dv, float* out,
                       float* lse, int64_t lse_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    float top = -INFINITY;
    for (int64_t p = 0; p < count; ++p) top = std::max(top, parts[p].m[r]);
    float* o = out + r * dv;
    std::fill_n(o, dv, 0.0f);
    if (lse) lse[r * lse_stride] = INFINITY;
    if (top == -INFINITY) continue;
    float total = 0.0f;
    for (int64_t p = 0; p < count; ++p) {
      if (parts[p].m[r] == -INFINITY) continue;
      const float w = std::exp(parts[p].m[r] - top);
      total += w * parts[p].l[r];
      const float* acc = parts[p].acc + r * dv;
      for (int64_t c = 0; c < dv; ++c) o[c] += w * acc[c];
    }
    const float inv = 1.0f / total;
    for (int64_t c = 0; c < dv; ++c) o[c] *= inv;
    if (lse) lse[r * lse_stride] = top + std::log(total);
  }
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
namespace {

constexpr int64_t kTile = 64;  // keys whose scores are held at once

__mmask16 first_lanes(int64_t n) { return __mmask16((1u << std::clamp<int64_t>(n, 0, 16)) - 1u); }

// 16 keys' (or values') dims from p widened to fp32, lanes past `lanes` zero.
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m512 load16(const float* p, __mmask16 lanes) { return _mm512_maskz_loadu_ps(lanes, p); }
inline __m512 load16(const uint16_t* p, __mmask16 lanes) {
  const __m256i h = _mm256_maskz_loadu_epi16(lanes, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// Lane i of the result: the sum of the lanes of a[i]. Pairs are interleaved and added, then
// quadruples, then the 128-bit blocks: 45 instructions for 16 sums.
[[gnu::always_inline]] inline __m512 sum_lanes16(const __m512 (&a)[16]) {
  __m512 pairs[8], quads[4], halves[2];
  for (int i = 0; i < 8; ++i)
    pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                             _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
  for (int i = 0; i < 4; ++i) {
    const __m512d x = _mm512_castps_pd(pairs[2 * i]), y = _mm512_castps_pd(pairs[2 * i + 1]);
    quads[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  auto fold = [](__m512 x, __m512 y) {  // blocks (0 + 1, 2 + 3) of x, then of y
    return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
  };
  halves[0] = fold(quads[0], quads[1]);
  halves[1] = fold(quads[2], quads[3]);
  return fold(halves[0], halves[1]);
}

// The scores of HB query rows (q, d apart) and 16 / HB keys (k, stride apart) into s (rows kTile
// apart): each (row, key) dot product in a register across the dims, the 16 summed together.
template <int HB, typename K>
void score_block(const float* q, int64_t d, const K* k, int64_t stride, float* s) {
  constexpr int KB = 16 / HB;
  __m512 dot[16];
  for (__m512& x : dot) x = _mm512_setzero_ps();
  auto chunk = [&](int64_t c, auto... lanes) {
    __m512 key[KB];
    for (int j = 0; j < KB; ++j) key[j] = load16(k + j * stride + c, lanes...);
    for (int h = 0; h < HB; ++h) {
      const __m512 query = load16(q + h * d + c, lanes...);
      for (int j = 0; j < KB; ++j)
        dot[h * KB + j] = _mm512_fmadd_ps(query, key[j], dot[h * KB + j]);
    }
  };
  int64_t c = 0;
  for (; c + 16 <= d; c += 16) chunk(c);
  if (c < d) chunk(c, first_lanes(d - c));
  alignas(64) float sums[16];
  _mm512_store_ps(sums, sum_lanes16(dot));
  for (int h = 0; h < HB; ++h) std::copy_n(sums + h * KB, KB, s + h * kTile);
}

// s[r * kTile + j] = q_r . key j for the tile's tk keys: rows HB at a time, keys 16 / HB at a
// time, the keys past the last whole block a dot product at a time.
template <typename K>
void scores(const float* q, int64_t rows, int64_t d, const K* k, int64_t stride, int64_t tk,
            float* s) {
  auto pass = [&](auto hb, int64_t r) {
    constexpr int HB = decltype(hb)::value, KB = 16 / HB;
    int64_t j = 0;
    for (; j + KB <= tk; j += KB)
      score_block<HB>(q + r * d, d, k + j * stride, stride, s + r * kTile + j);
    for (; j < tk; ++j)
      for (int h = 0; h < HB; ++h) {
        __m512 dot = _mm512_setzero_ps();
        for (int64_t c = 0; c < d; c += 16) {
          const __mmask16 lanes = first_lanes(d - c);
          dot = _mm512_fmadd_ps(load16(q + (r + h) * d + c, lanes),
                                load16(k + j * stride + c, lanes), dot);
        }
        s[(r + h) * kTile + j] = _mm512_reduce_add_ps(dot);
      }
  };
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) pass(std::integral_constant<int, 4>{}, r);
  for (; r + 2 <= rows; r += 2) pass(std::integral_constant<int, 2>{}, r);
  for (; r < rows; ++r) pass(std::integral_constant<int, 1>{}, r);
}

// acc[h][c] = alpha_h acc[h][c] + sum over the tile's keys j of p[h][j] value_j[c], for HB rows
// and DC vectors of dims from acc (rows dv apart), the last vector's lanes limited to `last`.
template <int HB, int DC, typename K>
void value_block(const float* p, int64_t tk, const K* v, int64_t stride, const float* alpha,
                 float* acc, int64_t dv, __mmask16 last) {
  __mmask16 lanes[DC];
  for (int c = 0; c < DC; ++c) lanes[c] = c == DC - 1 ? last : __mmask16(0xFFFF);
  __m512 sum[HB][DC];
  for (int h = 0; h < HB; ++h)
    for (int c = 0; c < DC; ++c)
      sum[h][c] = _mm512_mul_ps(load16(acc + h * dv + c * 16, lanes[c]), _mm512_set1_ps(alpha[h]));
  for (int64_t j = 0; j < tk; ++j) {
    __m512 value[DC];
    for (int c = 0; c < DC; ++c) value[c] = load16(v + j * stride + c * 16, lanes[c]);
    for (int h = 0; h < HB; ++h) {
      const __m512 weight = _mm512_set1_ps(p[h * kTile + j]);
      for (int c = 0; c < DC; ++c) sum[h][c] = _mm512_fmadd_ps(weight, value[c], sum[h][c]);
    }
  }
  for (int h = 0; h < HB; ++h)
    for (int c = 0; c < DC; ++c) _mm512_mask_storeu_ps(acc + h * dv + c * 16, lanes[c], sum[h][c]);
}

template <int HB, typename K>
void value_rows(const float* p, int64_t tk, const K* v, int64_t stride, const float* alpha,
                float* acc, int64_t dv) {
  int64_t c = 0;
  for (; c + 64 <= dv; c += 64)
    value_block<HB, 4>(p, tk, v + c, stride, alpha, acc + c, dv, first_lanes(dv - c - 48));
  for (; c < dv; c += 16)
    value_block<HB, 1>(p, tk, v + c, stride, alpha, acc + c, dv, first_lanes(dv - c));
}

// The instruction-set half of the kernel, for decode_driver.
struct Avx512 {
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
  decode_driver::run<Avx512>(q, rows, keys, lo, hi, out);
}

#elif !(defined(__AVX2__) && defined(__FMA__))  // AVX2 builds: attention_decode_avx2.cpp

bool attention_decode_available() { return false; }

void attention_decode_rows(const float*, int64_t, const DecodeKeys&, int64_t, int64_t,
                           const DecodePart&) {
  GLM4_CHECK(false, "[attention decode] this build has neither AVX-512 nor AVX2");
}

#endif

}  // namespace glm4::kernels
