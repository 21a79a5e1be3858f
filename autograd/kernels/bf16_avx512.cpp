// AVX512-BF16 kernels (vdpbf16ps): the panel product on the packed layouts, 8 rows x up to 3
// column groups of fp32 accumulators per step, and the decode-sized products that read each
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
GLM4_AVX512BF16 void rows_block(const uint16_t* a, const uint16_t* b, int64_t b_stride, int64_t kb0,
                                int64_t kb1, float* c, int64_t ldc, bool accumulate) {
  __m512 acc[kRows][NB];
  for (int r = 0; r < kRows; ++r)
    for (int j = 0; j < NB; ++j)
      acc[r][j] = accumulate ? _mm512_loadu_ps(c + r * ldc + j * 16) : _mm512_setzero_ps();
  for (int64_t kb = kb0; kb < kb1; ++kb) {
    const uint16_t* ak = a + kb * kBlockElems;
    const uint16_t* bk = b + kb * kBlockElems;
    for (int p = 0; p < 16; ++p) {
      __m512bh bv[NB];
      for (int j = 0; j < NB; ++j) bv[j] = __m512bh(_mm512_loadu_si512(bk + j * b_stride + p * 32));
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

// How far ahead of its reads the decode forward prefetches weights into L2, in bytes, at least:
// never less than the R rows a step reads. The rows a step reads are R interleaved streams of 64
// bytes, each of them short (1-4 KB a row at the MoE and mid shapes); the hardware prefetcher
// does not keep up with them, and one core read 12-15 GB/s with the next rows prefetched into L1
// instead. Walking the same bytes in address order 32 KB ahead into L2 gives 25-30 GB/s a core,
// and 45-55 with both (cold weights, 2 MB pages, AMD Zen 4). Where R rows are longer than that
// (8 rows of a 9B down_proj are 219 KB), 32 KB ahead in address order is still inside the block
// being read, its later rows fetched only after the step reached them: one block ahead instead
// read 1.4x (M = 1) and 1.6x (M = 4) as fast on 13,696-wide rows, one core of a Zen 5.
constexpr int64_t kPrefetchAhead = 32 << 10;

// out[r * MX + m] = sum_k Xb[m, k] W[n + r, k] for r < R, m < MX. Each sum is one chain of
// vdpbf16ps over k in order (16 lanes of k-pairs) reduced across lanes at the end, whatever R
// and MX are: a row of Y has the same bits in any row block and whatever rows of X come with it.
template <int MX, int R>
GLM4_AVX512BF16 void dot_rows(const uint16_t* Xb, int64_t kp, const uint16_t* W, int64_t K,
                              int64_t N, int64_t n, float* out) {
  __m512 acc[R][MX];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MX; ++m) acc[r][m] = _mm512_setzero_ps();
  const uint16_t* w = W + n * K;
  // The R rows are R * K contiguous elements; the step at k prefetches their lines [R s, R s + R)
  // of 64 bytes (s = k / 32) kPrefetchAhead or one block of R rows on, whichever is more, so the
  // rows after them arrive in address order before their block starts. Past W's last row it
  // prefetches that row's start again instead of other memory.
  uintptr_t ahead =
      reinterpret_cast<uintptr_t>(w) + std::max<int64_t>(kPrefetchAhead, R * K * int64_t(2));
  const uintptr_t end = reinterpret_cast<uintptr_t>(W + N * K);
  const uintptr_t last = reinterpret_cast<uintptr_t>(W + (N - 1) * K);
  for (int64_t k = 0; k < K; k += 32, ahead += 64 * R) {
    const __mmask32 mask = K - k >= 32 ? __mmask32(0xffffffffu) : __mmask32((1u << (K - k)) - 1);
    __m512bh x[MX];
    for (int m = 0; m < MX; ++m) x[m] = __m512bh(_mm512_loadu_si512(Xb + m * kp + k));
    for (int r = 0; r < R; ++r) {
      const uintptr_t line = ahead + 64 * r;
      _mm_prefetch(reinterpret_cast<const char*>(line < end ? line : last), _MM_HINT_T1);
      const __m512bh wv = __m512bh(_mm512_maskz_loadu_epi16(mask, w + r * K + k));
      for (int m = 0; m < MX; ++m) acc[r][m] = _mm512_dpbf16_ps(acc[r][m], wv, x[m]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MX; ++m) out[r * MX + m] = _mm512_reduce_add_ps(acc[r][m]);
}

// Rows [n, n + R) of Y from rows [n, n + R) of W.
template <int MX, int R>
GLM4_AVX512BF16 void forward_block(const uint16_t* Xb, int64_t kp, const uint16_t* W, int64_t K,
                                   int64_t N, int64_t n, float* Y, bool accumulate) {
  float out[R * MX];
  dot_rows<MX, R>(Xb, kp, W, K, N, n, out);
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MX; ++m) {
      float& y = Y[m * N + n + r];
      y = accumulate ? y + out[r * MX + m] : out[r * MX + m];
    }
}

// Weight rows a step reads: R * MX sums, MX rows of X and one weight vector fit the 32 vector
// registers, and R is a power of two dividing linear_batch's 16-row blocks.
template <int MX>
constexpr int kRowsPerStep = MX <= 2   ? 8
                             : MX <= 5 ? 4
                                       : 2;

template <int MX>
GLM4_AVX512BF16 void small_forward(const uint16_t* Xb, int64_t K, const uint16_t* W, int64_t N,
                                   int64_t n0, int64_t n1, float* Y, bool accumulate) {
  constexpr int R = kRowsPerStep<MX>;
  const int64_t kp = kblocks(K) * kKBlock;
  int64_t n = n0;
  for (; n + R <= n1; n += R) forward_block<MX, R>(Xb, kp, W, K, N, n, Y, accumulate);
  if (R > 4 && n + 4 <= n1) {
    forward_block<MX, 4>(Xb, kp, W, K, N, n, Y, accumulate);
    n += 4;
  }
  if (R > 2 && n + 2 <= n1) {
    forward_block<MX, 2>(Xb, kp, W, K, N, n, Y, accumulate);
    n += 2;
  }
  for (; n < n1; ++n) forward_block<MX, 1>(Xb, kp, W, K, N, n, Y, accumulate);
}

// dX[m, k0 + 32 CH) (+)= sum_n dYb[m, n] W[n, k] over every n, with CH chunks of 32 columns
// held in registers: rows n, n + 1 are interleaved into k-pairs on the fly (unpack keeps each
// 128-bit lane: lo holds k 8L..8L+3, hi k 8L+4..8L+7 of lane L) and put back in order at the end.
template <int MX, int CH>
GLM4_AVX512BF16 void grad_stripe(const uint16_t* dyb, int64_t np, int64_t N, const uint16_t* W,
                                 int64_t K, int64_t k0, float* dX, bool accumulate) {
  __m512 lo[MX][CH], hi[MX][CH];
  for (int m = 0; m < MX; ++m)
    for (int c = 0; c < CH; ++c) lo[m][c] = hi[m][c] = _mm512_setzero_ps();
  __mmask32 mask[CH];
  for (int c = 0; c < CH; ++c) {
    const int64_t left = K - (k0 + 32 * c);
    mask[c] = left >= 32  ? __mmask32(0xffffffffu)
              : left <= 0 ? __mmask32(0)
                          : __mmask32((1u << left) - 1);
  }
  for (int64_t n = 0; n < N; n += 2) {
    const uint16_t* even = W + n * K + k0;
    const uint16_t* odd = even + K;
    __m512bh d[MX];
    for (int m = 0; m < MX; ++m) {
      int32_t pair;
      std::memcpy(&pair, dyb + m * np + n, 4);
      d[m] = __m512bh(_mm512_set1_epi32(pair));
    }
    for (int c = 0; c < CH; ++c) {
      const __m512i a = _mm512_maskz_loadu_epi16(mask[c], even + 32 * c);
      const __m512i b =
          n + 1 < N ? _mm512_maskz_loadu_epi16(mask[c], odd + 32 * c) : _mm512_setzero_si512();
      const __m512bh l = __m512bh(_mm512_unpacklo_epi16(a, b));
      const __m512bh h = __m512bh(_mm512_unpackhi_epi16(a, b));
      for (int m = 0; m < MX; ++m) {
        lo[m][c] = _mm512_dpbf16_ps(lo[m][c], d[m], l);
        hi[m][c] = _mm512_dpbf16_ps(hi[m][c], d[m], h);
      }
    }
  }
  const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i second =
      _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  for (int m = 0; m < MX; ++m)
    for (int c = 0; c < CH; ++c) {
      const int64_t k = k0 + 32 * c, left = K - k;
      if (left <= 0) break;
      const __m512 v[2] = {_mm512_permutex2var_ps(lo[m][c], first, hi[m][c]),
                           _mm512_permutex2var_ps(lo[m][c], second, hi[m][c])};
      for (int half = 0; half < 2; ++half) {
        const int64_t n16 = std::min<int64_t>(16, left - 16 * half);
        if (n16 <= 0) break;
        const __mmask16 mk = n16 >= 16 ? __mmask16(0xffff) : __mmask16((1u << n16) - 1);
        float* out = dX + m * K + k + 16 * half;
        const __m512 r =
            accumulate ? _mm512_add_ps(v[half], _mm512_maskz_loadu_ps(mk, out)) : v[half];
        _mm512_mask_storeu_ps(out, mk, r);
      }
    }
}

template <int MX>
constexpr int kGradChunks = MX == 1   ? 8
                            : MX == 2 ? 6
                            : MX == 3 ? 4
                                      : 3;  // <= 24 sums

template <int MX>
void small_input_grad(const uint16_t* dyb, int64_t np, int64_t N, const uint16_t* W, int64_t K,
                      int64_t s0, int64_t s1, float* dX, bool accumulate) {
  constexpr int CH = kGradChunks<MX>;
  for (int64_t s = s0; s < s1; ++s)
    grad_stripe<MX, CH>(dyb, np, N, W, K, s * 32 * CH, dX, accumulate);
}

}  // namespace

int64_t avx512_small_grad_stripe(int64_t M) {
  switch (M) {
    case 1:
      return 32 * kGradChunks<1>;
    case 2:
      return 32 * kGradChunks<2>;
    case 3:
      return 32 * kGradChunks<3>;
  }
  return 32 * kGradChunks<4>;
}

void avx512_small_input_grad(const uint16_t* dyb, int64_t M, int64_t N, const uint16_t* W,
                             int64_t K, int64_t s0, int64_t s1, float* dX, bool accumulate) {
  const int64_t np = kblocks(N) * kKBlock;  // the row stride of round_rows_bf16
  switch (M) {
    case 1:
      return small_input_grad<1>(dyb, np, N, W, K, s0, s1, dX, accumulate);
    case 2:
      return small_input_grad<2>(dyb, np, N, W, K, s0, s1, dX, accumulate);
    case 3:
      return small_input_grad<3>(dyb, np, N, W, K, s0, s1, dX, accumulate);
    case 4:
      return small_input_grad<4>(dyb, np, N, W, K, s0, s1, dX, accumulate);
  }
}

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
  static_assert(kDecodeRows == 8, "avx512_small_forward is instantiated for M = 1..8");
  switch (M) {
    case 1:
      return small_forward<1>(Xb, K, W, N, n0, n1, Y, accumulate);
    case 2:
      return small_forward<2>(Xb, K, W, N, n0, n1, Y, accumulate);
    case 3:
      return small_forward<3>(Xb, K, W, N, n0, n1, Y, accumulate);
    case 4:
      return small_forward<4>(Xb, K, W, N, n0, n1, Y, accumulate);
    case 5:
      return small_forward<5>(Xb, K, W, N, n0, n1, Y, accumulate);
    case 6:
      return small_forward<6>(Xb, K, W, N, n0, n1, Y, accumulate);
    case 7:
      return small_forward<7>(Xb, K, W, N, n0, n1, Y, accumulate);
    case 8:
      return small_forward<8>(Xb, K, W, N, n0, n1, Y, accumulate);
  }
}

}  // namespace glm4::kernels::bf16
