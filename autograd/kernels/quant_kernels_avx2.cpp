// AVX2 + FMA quantized kernels (Zen 3 and other CPUs without AVX-512): codes widened to int32
// lanes, converted, dequantized with one fma and multiplied in with another; 4-bit codes split
// into low and high nibbles, other widths than 4 and 8 unpacked to bytes first.
#include <algorithm>
#include <cstring>

// GCC 12 flags the self-initialised "undefined" vectors inside its own intrinsics wherever they
// are inlined, so for the whole file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "autograd/kernels/affine_pack.h"
#include "autograd/kernels/quant_kernels.h"

#pragma GCC push_options
// CMakeLists.txt adds -mno-avx512f for this file, so that on an AVX-512 build machine it is
// still pure AVX2 code: what runs (and is measured) there is what runs on an AVX2-only CPU.
#pragma GCC target("avx2,fma,f16c")
#include "autograd/kernels/quant_simd_avx2.h"

namespace glm4::quant_detail {

namespace {

constexpr int64_t kParamBlock = 16;  // groups whose scales and biases are widened at once

struct Params {
  alignas(32) float scale[kParamBlock];
  alignas(32) float bias[kParamBlock];
};

// 4 bits: 16 codes are 8 bytes; byte i holds code 2i (low nibble) and 2i+1 (high), so each
// block of 16 columns of X is stored as its 8 even columns, then its 8 odd ones.
void prepare_x(int bits, const float* X, int64_t M, int64_t K, float* xp) {
  if (bits != 4) {
    std::memcpy(xp, X, size_t(M * K) * sizeof(float));
    return;
  }
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < K; c += 16)
      for (int64_t i = 0; i < 8; ++i) {
        xp[m * K + c + i] = X[m * K + c + 2 * i];
        xp[m * K + c + 8 + i] = X[m * K + c + 2 * i + 1];
      }
}

// 8 bytes -> 8 int32 lanes.
inline __m256i widen_bytes(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// Two accumulators per output (16 partial sums, as many as an AVX-512 product has): with 8 the
// rounding error grows to about 1.4 times the fp32 GEMM's.
template <int M, int R>
void emit(__m256 (&acc)[2][R][M], int64_t n, float* Y, int64_t ldy, bool accumulate) {
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) {
      const float s = hsum(_mm256_add_ps(acc[0][r][m], acc[1][r][m]));
      float& y = Y[m * ldy + n + r];
      y = accumulate ? y + s : s;
    }
}

// Rows [n, n + R) of W against M rows of X: 4-bit codes by nibbles, 8-bit codes directly, any
// other width unpacked to bytes first.
template <int M, int R, int kBits>
void rows(const QuantizedMatrix& W, const float* xp, int64_t n, float* Y, int64_t ldy,
          bool accumulate) {
  const int64_t K = W.cols, group = W.group_size, groups = W.groups();
  __m256 acc[2][R][M];
  for (int h = 0; h < 2; ++h)
    for (int r = 0; r < R; ++r)
      for (int m = 0; m < M; ++m) acc[h][r][m] = _mm256_setzero_ps();
  Params p[R];
  alignas(32) uint8_t unpacked[R][128];
  const __m256i nibble = _mm256_set1_epi32(15);
  const uint8_t* row[R];
  for (int r = 0; r < R; ++r) row[r] = W.row(n + r);
  const int64_t ahead_rows = prefetch_rows_ahead(R, W.row_bytes());
  const int64_t code_ahead = ahead_rows * W.row_bytes();
  for (int64_t gb = 0; gb < groups; gb += kParamBlock) {
    const int64_t count = std::min(kParamBlock, groups - gb);
    for (int r = 0; r < R; ++r) {
      prefetch_params_l1(W, n + r + ahead_rows, gb, groups);
      load_group_params(W, W.scales, n + r, gb, count, p[r].scale);
      load_group_params(W, W.biases, n + r, gb, count, p[r].bias);
    }
    for (int64_t g = 0; g < count; ++g) {
      const uint64_t c0 = uint64_t((gb + g) * group);
      __m256 scale[R], bias[R];
      const uint8_t* codes[R];
      for (int r = 0; r < R; ++r) {
        scale[r] = _mm256_set1_ps(p[r].scale[g]);
        bias[r] = _mm256_set1_ps(p[r].bias[g]);
        const uint8_t* src = row[r] + (kBits ? c0 * kBits / 8 : c0 * W.bits / 8);
        prefetch_l1(src + code_ahead);
        if constexpr (kBits == 4 || kBits == 8) {
          codes[r] = src;
        } else {
          unpack_codes(W.bits, row[r], c0, group, unpacked[r]);
          codes[r] = unpacked[r];
        }
      }
      if constexpr (kBits == 4) {
        for (int64_t j = 0; j < group; j += 16) {
          __m256 even[M], odd[M];
          for (int m = 0; m < M; ++m) {
            even[m] = _mm256_loadu_ps(xp + m * K + c0 + j);
            odd[m] = _mm256_loadu_ps(xp + m * K + c0 + j + 8);
          }
          for (int r = 0; r < R; ++r) {
            const __m256i v = widen_bytes(codes[r] + j / 2);
            const __m256 lo =
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v, nibble)), scale[r], bias[r]);
            const __m256 hi =
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4)), scale[r], bias[r]);
            for (int m = 0; m < M; ++m) {
              acc[0][r][m] = _mm256_fmadd_ps(lo, even[m], acc[0][r][m]);
              acc[1][r][m] = _mm256_fmadd_ps(hi, odd[m], acc[1][r][m]);
            }
          }
        }
      } else {
        for (int64_t j = 0; j < group; j += 16) {
          __m256 x0[M], x1[M];
          for (int m = 0; m < M; ++m) {
            x0[m] = _mm256_loadu_ps(xp + m * K + c0 + j);
            x1[m] = _mm256_loadu_ps(xp + m * K + c0 + j + 8);
          }
          for (int r = 0; r < R; ++r) {
            const __m256 w0 =
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(widen_bytes(codes[r] + j)), scale[r], bias[r]);
            const __m256 w1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(widen_bytes(codes[r] + j + 8)),
                                              scale[r], bias[r]);
            for (int m = 0; m < M; ++m) {
              acc[0][r][m] = _mm256_fmadd_ps(w0, x0[m], acc[0][r][m]);
              acc[1][r][m] = _mm256_fmadd_ps(w1, x1[m], acc[1][r][m]);
            }
          }
        }
      }
    }
  }
  emit<M, R>(acc, n, Y, ldy, accumulate);
}

template <int M, int R>
void rows_any(const QuantizedMatrix& W, const float* xp, int64_t n, float* Y, int64_t ldy,
              bool accumulate) {
  if (W.bits == 4)
    rows<M, R, 4>(W, xp, n, Y, ldy, accumulate);
  else if (W.bits == 8)
    rows<M, R, 8>(W, xp, n, Y, ldy, accumulate);
  else
    rows<M, R, 0>(W, xp, n, Y, ldy, accumulate);
}

template <int M>
void forward_m(const QuantizedMatrix& W, const float* xp, int64_t n0, int64_t n1, float* Y,
               int64_t ldy, bool accumulate) {
  constexpr int R = M == 1 ? 4 : M == 2 ? 2 : 1;  // 16 ymm registers
  int64_t n = n0;
  for (; n + R <= n1; n += R) rows_any<M, R>(W, xp, n, Y, ldy, accumulate);
  for (; n < n1; ++n) rows_any<M, 1>(W, xp, n, Y, ldy, accumulate);
}

void forward_rows(const QuantizedMatrix& W, const float* xp, int64_t M, int64_t n0, int64_t n1,
                  float* Y, int64_t ldy, bool accumulate) {
  switch (M) {
    case 1:
      return forward_m<1>(W, xp, n0, n1, Y, ldy, accumulate);
    case 2:
      return forward_m<2>(W, xp, n0, n1, Y, ldy, accumulate);
    case 3:
      return forward_m<3>(W, xp, n0, n1, Y, ldy, accumulate);
    case 4:
      return forward_m<4>(W, xp, n0, n1, Y, ldy, accumulate);
  }
}

void dequant_row(const QuantizedMatrix& W, int64_t r, int64_t c0, int64_t count, float* out) {
  const int64_t group = W.group_size;
  Params p;
  alignas(32) uint8_t unpacked[128];
  for (int64_t c = 0; c < count; c += group * kParamBlock) {
    const int64_t g0 = (c0 + c) / group, ng = std::min(kParamBlock, (count - c) / group);
    load_group_params(W, W.scales, r, g0, ng, p.scale);
    load_group_params(W, W.biases, r, g0, ng, p.bias);
    for (int64_t g = 0; g < ng; ++g) {
      const int64_t col = (g0 + g) * group;
      const uint8_t* codes = W.row(r) + col;
      if (W.bits != 8) {
        unpack_codes(W.bits, W.row(r), col, group, unpacked);
        codes = unpacked;
      }
      const __m256 scale = _mm256_set1_ps(p.scale[g]), bias = _mm256_set1_ps(p.bias[g]);
      float* o = out + c + g * group;
      for (int64_t j = 0; j < group; j += 8)
        _mm256_storeu_ps(o + j,
                         _mm256_fmadd_ps(_mm256_cvtepi32_ps(widen_bytes(codes + j)), scale, bias));
    }
  }
}

}  // namespace

const QuantKernels& avx2_kernels() {
  static const QuantKernels k{"avx2", prepare_x, forward_rows, dequant_row};
  return k;
}

}  // namespace glm4::quant_detail

#pragma GCC pop_options
