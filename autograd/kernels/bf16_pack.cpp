// Packing into the tile layouts of bf16_internal.h: activations rounded from fp32 to bf16
// (nearest even, vcvtne2ps2bf16) and weight panels copied or pair-interleaved from the
// row-major bf16 weight. Edges are zero-filled with masked loads that never read past the data.
#include <algorithm>
#include <cstring>

#include "autograd/kernels/bf16_internal.h"
#include "autograd/kernels/bf16_target.h"
#include "autograd/kernels/transpose16.h"

namespace glm4::kernels::bf16 {

namespace {

inline __mmask16 mask16(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}
inline __mmask32 mask32(int64_t n) {
  return n >= 32 ? __mmask32(0xffffffffu) : n <= 0 ? __mmask32(0) : __mmask32((1u << n) - 1);
}

// 32 fp32 values (n of them valid) rounded to 32 bf16.
GLM4_AVX512BF16 inline __m512i round32(const float* src, int64_t n) {
  const __m512 lo = _mm512_maskz_loadu_ps(mask16(n), src);
  const __m512 hi = _mm512_maskz_loadu_ps(mask16(n - 16), src + 16);
  return __m512i(_mm512_cvtne2ps_pbh(hi, lo));
}

}  // namespace

GLM4_AVX512BF16 void pack_rows_f32(const float* src, int64_t rows, int64_t k, int64_t ld,
                                   int64_t g0, int64_t g1, int64_t kb, uint16_t* dst) {
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t b = 0; b < kb; ++b) {
      uint16_t* out = dst + (g * kb + b) * kBlockElems;
      for (int64_t i = 0; i < kGroup; ++i) {
        const int64_t r = g * kGroup + i;
        const __m512i v = r < rows ? round32(src + r * ld + b * kKBlock, k - b * kKBlock)
                                   : _mm512_setzero_si512();
        _mm512_storeu_si512(out + i * kKBlock, v);
      }
    }
}

GLM4_AVX512BF16 void pack_pairs_f32(const float* src, int64_t cols, int64_t k, int64_t ld,
                                    int64_t g0, int64_t g1, int64_t kb, uint16_t* dst) {
  __m512i r[16];
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t b = 0; b < kb; ++b) {
      for (int64_t i = 0; i < kGroup; ++i) {  // row i: column c's 16 k-pairs
        const int64_t c = g * kGroup + i;
        r[i] = c < cols ? round32(src + c * ld + b * kKBlock, k - b * kKBlock)
                        : _mm512_setzero_si512();
      }
      transpose16(r);  // row p: k-pair p of the 16 columns
      uint16_t* out = dst + (g * kb + b) * kBlockElems;
      for (int p = 0; p < 16; ++p) _mm512_storeu_si512(out + p * 32, r[p]);
    }
}

GLM4_AVX512BF16 void pack_rows_bf16(const uint16_t* W, int64_t ld, int64_t r0, int64_t r1,
                                    int64_t k0, int64_t k1, uint16_t* dst) {
  const int64_t kb = kblocks(k1 - k0), gs = groups(r1 - r0);
  for (int64_t g = 0; g < gs; ++g)
    for (int64_t i = 0; i < kGroup; ++i) {  // each source row read once, front to back
      const int64_t r = r0 + g * kGroup + i;
      uint16_t* out = dst + g * kb * kBlockElems + i * kKBlock;
      for (int64_t b = 0; b < kb; ++b) {
        const int64_t kk = k0 + b * kKBlock;
        const __m512i v = r < r1 ? _mm512_maskz_loadu_epi16(mask32(k1 - kk), W + r * ld + kk)
                                 : _mm512_setzero_si512();
        _mm512_storeu_si512(out + b * kBlockElems, v);
      }
    }
}

GLM4_AVX512BF16 void pack_pairs_bf16(const uint16_t* W, int64_t ld, int64_t n0, int64_t n1,
                                     int64_t c0, int64_t c1, uint16_t* dst) {
  const int64_t kb = kblocks(n1 - n0), gs = groups(c1 - c0);
  for (int64_t b = 0; b < kb; ++b)
    for (int64_t p = 0; p < 16; ++p) {  // rows n, n + 1 read once, across every column group
      const int64_t n = n0 + b * kKBlock + 2 * p;
      const uint16_t* even_row = W + n * ld;
      const uint16_t* odd_row = even_row + ld;
      for (int64_t g = 0; g < gs; ++g) {
        const int64_t c = c0 + g * kGroup;
        const __mmask16 m = mask16(c1 - c);
        const __m256i even =
            n < n1 ? _mm256_maskz_loadu_epi16(m, even_row + c) : _mm256_setzero_si256();
        const __m256i odd =
            n + 1 < n1 ? _mm256_maskz_loadu_epi16(m, odd_row + c) : _mm256_setzero_si256();
        const __m512i v = _mm512_or_si512(_mm512_cvtepu16_epi32(even),
                                          _mm512_slli_epi32(_mm512_cvtepu16_epi32(odd), 16));
        _mm512_storeu_si512(dst + (g * kb + b) * kBlockElems + p * 32, v);
      }
    }
}

GLM4_AVX512BF16 void store_transposed(const float* c, int64_t ldc, int64_t rows, int64_t cols,
                                      float* y, int64_t ldy, bool accumulate) {
  __m512i t[16];
  for (int64_t c0 = 0; c0 < cols; c0 += 16)
    for (int64_t r0 = 0; r0 < rows; r0 += 16) {  // along y's rows
      const __mmask16 m = mask16(rows - r0);
      for (int i = 0; i < 16; ++i)  // C is padded to whole 16 x 16 tiles: no masks on reads
        t[i] = _mm512_loadu_si512(c + (r0 + i) * ldc + c0);
      transpose16(t);
      for (int64_t j = 0; j < std::min<int64_t>(16, cols - c0); ++j) {
        float* out = y + (c0 + j) * ldy + r0;
        __m512 v = _mm512_castsi512_ps(t[j]);
        if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, out));
        _mm512_mask_storeu_ps(out, m, v);
      }
    }
}

GLM4_AVX512BF16 void round_rows_bf16(const float* X, int64_t M, int64_t K, uint16_t* dst) {
  const int64_t kp = kblocks(K) * kKBlock;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < kp; k += kKBlock)
      _mm512_storeu_si512(dst + m * kp + k, round32(X + m * K + k, K - k));
}

}  // namespace glm4::kernels::bf16
