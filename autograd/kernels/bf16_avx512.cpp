// AVX512-BF16 kernels (vdpbf16ps): the panel product on the packed layouts, 8 rows x up to 3
// column groups of fp32 accumulators per step, and the decode-sized forward that reads each
// weight row once straight from the row-major weight.
#include <algorithm>
#include <cstring>

#include "autograd/kernels/bf16_internal.h"
#include "autograd/kernels/bf16_target.h"

namespace glm4::kernels::bf16 {

namespace {

constexpr int kRows = 8;  // A rows per register block (two blocks per row group)

// C rows [r0, r0 + 8) x column groups [0, NB) of the panel.
template <int NB>
GLM4_AVX512BF16 void rows_block(const uint16_t* a, const uint16_t* b, int64_t b_stride,
                                int64_t kb0, int64_t kb1, float* c, int64_t ldc, bool accumulate) {
  __m512 acc[kRows][NB];
  for (int r = 0; r < kRows; ++r)
    for (int j = 0; j < NB; ++j)
      acc[r][j] = accumulate ? _mm512_loadu_ps(c + r * ldc + j * 16) : _mm512_setzero_ps();
  for (int64_t kb = kb0; kb < kb1; ++kb) {
    const uint16_t* ak = a + kb * kBlockElems;
    const uint16_t* bk = b + kb * kBlockElems;
    for (int p = 0; p < 16; ++p) {
      __m512bh bv[NB];
      for (int j = 0; j < NB; ++j)
        bv[j] = __m512bh(_mm512_loadu_si512(bk + j * b_stride + p * 32));
      for (int r = 0; r < kRows; ++r) {
        int32_t pair;
        std::memcpy(&pair, ak + r * kKBlock + 2 * p, 4);
        const __m512bh av = __m512bh(_mm512_set1_epi32(pair));
        for (int j = 0; j < NB; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], av, bv[j]);
      }
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int j = 0; j < NB; ++j) _mm512_storeu_ps(c + r * ldc + j * 16, acc[r][j]);
}

// out[r * MX + m] = sum_k Xb[m, k] W[n + r, k] for r < R, m < MX.
template <int MX, int R>
GLM4_AVX512BF16 void dot_rows(const uint16_t* Xb, int64_t kp, const uint16_t* W, int64_t K,
                              int64_t n, float* out) {
  __m512 acc[R][MX];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MX; ++m) acc[r][m] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 32) {
    const __mmask32 mask = K - k >= 32 ? __mmask32(0xffffffffu) : __mmask32((1u << (K - k)) - 1);
    __m512bh x[MX];
    for (int m = 0; m < MX; ++m) x[m] = __m512bh(_mm512_loadu_si512(Xb + m * kp + k));
    for (int r = 0; r < R; ++r) {
      const __m512bh w = __m512bh(_mm512_maskz_loadu_epi16(mask, W + (n + r) * K + k));
      for (int m = 0; m < MX; ++m) acc[r][m] = _mm512_dpbf16_ps(acc[r][m], w, x[m]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MX; ++m) out[r * MX + m] = _mm512_reduce_add_ps(acc[r][m]);
}

template <int MX>
GLM4_AVX512BF16 void small_forward(const uint16_t* Xb, int64_t K, const uint16_t* W, int64_t N,
                                   int64_t n0, int64_t n1, float* Y, bool accumulate) {
  constexpr int R = MX <= 2 ? 4 : 2;
  const int64_t kp = kblocks(K) * kKBlock;
  float out[R * MX];
  auto emit = [&](int64_t n, int rows) {
    for (int r = 0; r < rows; ++r)
      for (int m = 0; m < MX; ++m) {
        float& y = Y[m * N + n + r];
        y = accumulate ? y + out[r * MX + m] : out[r * MX + m];
      }
  };
  int64_t n = n0;
  for (; n + R <= n1; n += R) {
    dot_rows<MX, R>(Xb, kp, W, K, n, out);
    emit(n, R);
  }
  for (; n < n1; ++n) {
    dot_rows<MX, 1>(Xb, kp, W, K, n, out);
    emit(n, 1);
  }
}

}  // namespace

void avx512_panel(const PanelArgs& p) {
  for (int64_t i = 0; i < p.ga; ++i)
    for (int64_t half = 0; half < 2; ++half) {
      const uint16_t* a = p.a + i * p.a_stride + half * kRows * kKBlock;
      float* c = p.c + (i * kGroup + half * kRows) * p.ldc;
      int64_t j = 0;
      for (; j + 3 <= p.gb; j += 3)
        rows_block<3>(a, p.b + j * p.b_stride, p.b_stride, p.kb0, p.kb1, c + j * 16, p.ldc,
                      p.accumulate);
      if (p.gb - j == 2)
        rows_block<2>(a, p.b + j * p.b_stride, p.b_stride, p.kb0, p.kb1, c + j * 16, p.ldc,
                      p.accumulate);
      else if (p.gb - j == 1)
        rows_block<1>(a, p.b + j * p.b_stride, p.b_stride, p.kb0, p.kb1, c + j * 16, p.ldc,
                      p.accumulate);
    }
}

void avx512_small_forward(const uint16_t* Xb, int64_t M, int64_t K, const uint16_t* W, int64_t N,
                          int64_t n0, int64_t n1, float* Y, bool accumulate) {
  switch (M) {
    case 1: return small_forward<1>(Xb, K, W, N, n0, n1, Y, accumulate);
    case 2: return small_forward<2>(Xb, K, W, N, n0, n1, Y, accumulate);
    case 3: return small_forward<3>(Xb, K, W, N, n0, n1, Y, accumulate);
    case 4: return small_forward<4>(Xb, K, W, N, n0, n1, Y, accumulate);
  }
}

}  // namespace glm4::kernels::bf16
