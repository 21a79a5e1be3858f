// AVX-512 quantized kernels. 4-bit codes become weights through a 16-entry table per group and
// row (fma(scale, 0..15, bias) in one register, looked up with vpermps, which reads only the low
// 4 bits of each index); 8-bit codes, and the other widths after unpacking to bytes, are widened
// and dequantized with one fma. Compiled for AVX-512 whatever the build flags, called only on
// CPUs that have it (quant_dispatch.cpp).
#include <algorithm>
#include <cstring>

// GCC 12 flags the self-initialised "undefined" vectors inside its own intrinsics wherever they
// are inlined, so for the whole file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "autograd/kernels/affine_pack.h"
#include "autograd/kernels/quant_grad_tile.h"
#include "autograd/kernels/quant_kernels.h"

// Everything below is compiled for AVX-512; the headers above keep their own options, so no
// inline function shared with other files gets AVX-512 code (quant_simd.h's have internal linkage).
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma,f16c")
#include "autograd/kernels/quant_simd.h"

namespace glm4::quant_detail {

namespace {

struct Params {
  alignas(64) float scale[kParamBlock];
  alignas(64) float bias[kParamBlock];
};

// 4 bits: 32 codes are 16 bytes; byte i holds code 2i (low nibble) and code 2i+1 (high), so
// each block of 32 columns of X is stored as its 16 even columns, then its 16 odd ones.
void prepare_x(int bits, const float* X, int64_t M, int64_t K, float* xp) {
  if (bits != 4) {
    std::memcpy(xp, X, size_t(M * K) * sizeof(float));
    return;
  }
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < K; c += 32)
      for (int64_t i = 0; i < 16; ++i) {
        xp[m * K + c + i] = X[m * K + c + 2 * i];
        xp[m * K + c + 16 + i] = X[m * K + c + 2 * i + 1];
      }
}

inline __m512 code_table(const Params& p, int64_t g) {
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  return _mm512_fmadd_ps(iota, _mm512_set1_ps(p.scale[g]), _mm512_set1_ps(p.bias[g]));
}

// 16 bytes -> 16 int32 lanes.
inline __m512i widen_bytes(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Rows [n, n + R) of a 4-bit W against M rows of X.
template <int M, int R>
void rows_4bit(const QuantizedMatrix& W, const float* xp, int64_t n, float* Y, int64_t ldy,
               bool accumulate) {
  const int64_t K = W.cols, group = W.group_size, groups = W.groups();
  __m512 acc[R][M];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) acc[r][m] = _mm512_setzero_ps();
  Params p[R];
  const uint8_t* row[R];
  for (int r = 0; r < R; ++r) row[r] = W.row(n + r);
  const int64_t ahead_rows = prefetch_rows_ahead(R, W.row_bytes());
  const int64_t code_ahead = ahead_rows * W.row_bytes();
  for (int64_t gb = 0; gb < groups; gb += kParamBlock) {
    const int64_t count = std::min(kParamBlock, groups - gb);
    for (int r = 0; r < R; ++r) {
      prefetch_params_l1(W, n + r + ahead_rows, gb, groups);
      _mm512_store_ps(p[r].scale, widen_params16(W, W.scales, n + r, gb, count, groups));
      _mm512_store_ps(p[r].bias, widen_params16(W, W.biases, n + r, gb, count, groups));
    }
    for (int64_t g = 0; g < count; ++g) {
      __m512 table[R];
      for (int r = 0; r < R; ++r) table[r] = code_table(p[r], g);
      const uint64_t c0 = uint64_t((gb + g) * group);
      for (int r = 0; r < R; ++r) prefetch_l1(row[r] + c0 / 2 + code_ahead);
      for (uint64_t c = c0; c < c0 + uint64_t(group); c += 32) {
        __m512 even[M], odd[M];
        for (int m = 0; m < M; ++m) {
          even[m] = _mm512_loadu_ps(xp + m * K + c);
          odd[m] = _mm512_loadu_ps(xp + m * K + c + 16);
        }
        for (int r = 0; r < R; ++r) {
          const __m512i v = widen_bytes(row[r] + c / 2);
          const __m512 lo = _mm512_permutexvar_ps(v, table[r]);
          const __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table[r]);
          for (int m = 0; m < M; ++m) {
            acc[r][m] = _mm512_fmadd_ps(lo, even[m], acc[r][m]);
            acc[r][m] = _mm512_fmadd_ps(hi, odd[m], acc[r][m]);
          }
        }
      }
    }
  }
  emit_sums<M, R>(acc, n, Y, ldy, accumulate);
}

// Rows [n, n + R) of an 8-bit W, or of any width when kUnpack (codes unpacked to bytes first).
template <int M, int R, bool kUnpack>
void rows_bytes(const QuantizedMatrix& W, const float* xp, int64_t n, float* Y, int64_t ldy,
                bool accumulate) {
  const int64_t K = W.cols, group = W.group_size, groups = W.groups();
  __m512 acc[R][M];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) acc[r][m] = _mm512_setzero_ps();
  Params p[R];
  alignas(64) uint8_t unpacked[R][128];
  const int64_t ahead_rows = prefetch_rows_ahead(R, W.row_bytes());
  const int64_t code_ahead = ahead_rows * W.row_bytes();
  for (int64_t gb = 0; gb < groups; gb += kParamBlock) {
    const int64_t count = std::min(kParamBlock, groups - gb);
    for (int r = 0; r < R; ++r) {
      prefetch_params_l1(W, n + r + ahead_rows, gb, groups);
      _mm512_store_ps(p[r].scale, widen_params16(W, W.scales, n + r, gb, count, groups));
      _mm512_store_ps(p[r].bias, widen_params16(W, W.biases, n + r, gb, count, groups));
    }
    for (int64_t g = 0; g < count; ++g) {
      const int64_t c0 = (gb + g) * group;
      const uint8_t* codes[R];
      __m512 scale[R], bias[R];
      for (int r = 0; r < R; ++r) {
        prefetch_l1(W.row(n + r) + c0 * W.bits / 8 + code_ahead);
        if constexpr (kUnpack) {
          unpack_codes(W.bits, W.row(n + r), c0, group, unpacked[r]);
          codes[r] = unpacked[r];
        } else {
          codes[r] = W.row(n + r) + c0;
        }
        scale[r] = _mm512_set1_ps(p[r].scale[g]);
        bias[r] = _mm512_set1_ps(p[r].bias[g]);
      }
      for (int64_t j = 0; j < group; j += 16) {
        __m512 x[M];
        for (int m = 0; m < M; ++m) x[m] = _mm512_loadu_ps(xp + m * K + c0 + j);
        for (int r = 0; r < R; ++r) {
          const __m512 q = _mm512_cvtepi32_ps(widen_bytes(codes[r] + j));
          const __m512 w = _mm512_fmadd_ps(q, scale[r], bias[r]);
          for (int m = 0; m < M; ++m) acc[r][m] = _mm512_fmadd_ps(w, x[m], acc[r][m]);
        }
      }
    }
  }
  emit_sums<M, R>(acc, n, Y, ldy, accumulate);
}

template <int M, int R>
void rows(const QuantizedMatrix& W, const float* xp, int64_t n, float* Y, int64_t ldy,
          bool accumulate) {
  if (W.bits == 4)
    rows_4bit<M, R>(W, xp, n, Y, ldy, accumulate);
  else if (W.bits == 8)
    rows_bytes<M, R, false>(W, xp, n, Y, ldy, accumulate);
  else
    rows_bytes<M, R, true>(W, xp, n, Y, ldy, accumulate);
}

template <int M>
void forward_m(const QuantizedMatrix& W, const float* xp, int64_t n0, int64_t n1, float* Y,
               int64_t ldy, bool accumulate) {
  constexpr int R = M <= 2 ? 4 : 2;
  int64_t n = n0;
  for (; n + R <= n1; n += R) rows<M, R>(W, xp, n, Y, ldy, accumulate);
  for (; n < n1; ++n) rows<M, 1>(W, xp, n, Y, ldy, accumulate);
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
  // lo/hi lanes back into column order: lo0 hi0 lo1 hi1 ...
  const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i second =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  Params p;
  alignas(64) uint8_t unpacked[128];
  for (int64_t c = 0; c < count; c += group * kParamBlock) {
    const int64_t g0 = (c0 + c) / group, ng = std::min(kParamBlock, (count - c) / group);
    _mm512_store_ps(p.scale, widen_params16(W, W.scales, r, g0, ng, W.groups()));
    _mm512_store_ps(p.bias, widen_params16(W, W.biases, r, g0, ng, W.groups()));
    for (int64_t g = 0; g < ng; ++g) {
      const int64_t col = (g0 + g) * group;
      float* o = out + c + g * group;
      if (W.bits == 4) {
        const __m512 table = code_table(p, g);
        for (int64_t j = 0; j < group; j += 32) {
          const __m512i v = widen_bytes(W.row(r) + (col + j) / 2);
          const __m512 lo = _mm512_permutexvar_ps(v, table);
          const __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table);
          _mm512_storeu_ps(o + j, _mm512_permutex2var_ps(lo, first, hi));
          _mm512_storeu_ps(o + j + 16, _mm512_permutex2var_ps(lo, second, hi));
        }
        continue;
      }
      const uint8_t* codes = W.row(r) + col;
      if (W.bits != 8) {
        unpack_codes(W.bits, W.row(r), col, group, unpacked);
        codes = unpacked;
      }
      const __m512 scale = _mm512_set1_ps(p.scale[g]), bias = _mm512_set1_ps(p.bias[g]);
      for (int64_t j = 0; j < group; j += 16)
        _mm512_storeu_ps(o + j,
                         _mm512_fmadd_ps(_mm512_cvtepi32_ps(widen_bytes(codes + j)), scale, bias));
    }
  }
}

// Rows ahead the input gradient prefetches (bench: 8 to 16 read the same; 32 and more, less).
constexpr int64_t kInputGradAhead = 8;

// One scale or bias of W, widened to fp32.
inline float param_at(const QuantizedMatrix& W, const void* params, int64_t i) {
  if (W.scale_dtype == DType::F32) return static_cast<const float*>(params)[i];
  const uint16_t h = static_cast<const uint16_t*>(params)[i];
  if (W.scale_dtype == DType::F16) return _cvtsh_ss(h);
  return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(int(uint32_t(h) << 16))));
}

// dX[m, cs : cs + 32 C] (+)= sum_n dY[m, n] deq(W)[n, cs : cs + 32 C] for a 4-bit W: the
// accumulators stay in registers as the code tables give them (each 32 columns' even ones, then
// their odd ones) and are put back in column order once, after the last row.
template <int M, int C>
void input_grad_4bit(const float* dY, const QuantizedMatrix& W, int64_t cs, float* dX,
                     bool accumulate) {
  const int64_t N = W.rows, K = W.cols, group = W.group_size, groups = W.groups();
  const int64_t param_bytes = int64_t(dtype_size(W.scale_dtype));
  __m512 even[M][C], odd[M][C];
  for (int m = 0; m < M; ++m)
    for (int c = 0; c < C; ++c) even[m][c] = odd[m][c] = _mm512_setzero_ps();
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  int64_t group_of[C];  // the group of each 32 columns, worked out once (not per row)
  for (int c = 0; c < C; ++c) group_of[c] = (cs + 32 * c) / group;
  for (int64_t n = 0; n < N; ++n) {
    const uint8_t* row = W.row(n);
    // Every line of this stripe's codes and its scales and biases, a few rows ahead: the rows
    // are strided, and a stripe of 32 C columns spans C / 4 lines of codes.
    for (int64_t b = 0; b < 16 * C; b += 64) prefetch(W.row(n + kInputGradAhead) + cs / 2 + b);
    const int64_t ahead_params = ((n + kInputGradAhead) * groups + cs / group) * param_bytes;
    prefetch(static_cast<const uint8_t*>(W.scales) + ahead_params);
    prefetch(static_cast<const uint8_t*>(W.biases) + ahead_params);
    __m512 d[M];
    for (int m = 0; m < M; ++m) d[m] = _mm512_set1_ps(dY[m * N + n]);
    __m512 table = _mm512_setzero_ps();
#pragma GCC unroll 16  // the accumulators stay in registers only when this loop is unrolled
    for (int c = 0; c < C; ++c) {
      if (c == 0 || group_of[c] != group_of[c - 1]) {
        const int64_t i = n * groups + group_of[c];
        table = _mm512_fmadd_ps(iota, _mm512_set1_ps(param_at(W, W.scales, i)),
                                _mm512_set1_ps(param_at(W, W.biases, i)));
      }
      const __m512i v = widen_bytes(row + (cs + 32 * c) / 2);
      const __m512 lo = _mm512_permutexvar_ps(v, table);
      const __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table);
      for (int m = 0; m < M; ++m) {
        even[m][c] = _mm512_fmadd_ps(d[m], lo, even[m][c]);
        odd[m][c] = _mm512_fmadd_ps(d[m], hi, odd[m][c]);
      }
    }
  }
  const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i second =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int m = 0; m < M; ++m)
    for (int c = 0; c < C; ++c) {
      float* dx = dX + m * K + cs + 32 * c;
      __m512 a = _mm512_permutex2var_ps(even[m][c], first, odd[m][c]);
      __m512 b = _mm512_permutex2var_ps(even[m][c], second, odd[m][c]);
      if (accumulate) {
        a = _mm512_add_ps(_mm512_loadu_ps(dx), a);
        b = _mm512_add_ps(_mm512_loadu_ps(dx + 16), b);
      }
      _mm512_storeu_ps(dx, a);
      _mm512_storeu_ps(dx + 16, b);
    }
}

// Columns [c0, c1) in blocks of 32 C (16 accumulators for M rows), then 32 at a time.
template <int M, int C>
void input_grad_4bit_m(const float* dY, const QuantizedMatrix& W, int64_t c0, int64_t c1, float* dX,
                       bool accumulate) {
  int64_t c = c0;
  for (; c + 32 * C <= c1; c += 32 * C) input_grad_4bit<M, C>(dY, W, c, dX, accumulate);
  for (; c < c1; c += 32) input_grad_4bit<M, 1>(dY, W, c, dX, accumulate);
}

bool input_grad_stripe(const float* dY, int64_t M, const QuantizedMatrix& W, int64_t c0, int64_t c1,
                       float* dX, bool accumulate) {
  if (W.bits != 4) return false;
  switch (M) {
    case 1:
      input_grad_4bit_m<1, 8>(dY, W, c0, c1, dX, accumulate);
      return true;
    case 2:
      input_grad_4bit_m<2, 4>(dY, W, c0, c1, dX, accumulate);
      return true;
    case 3:
      input_grad_4bit_m<3, 2>(dY, W, c0, c1, dX, accumulate);
      return true;
    case 4:
      input_grad_4bit_m<4, 2>(dY, W, c0, c1, dX, accumulate);
      return true;
  }
  return false;
}

}  // namespace

const QuantKernels& avx512_kernels() {
  static const QuantKernels k{"avx512",    prepare_x,         forward_rows,
                              dequant_row, input_grad_stripe, input_grad_tile_avx512};
  return k;
}

}  // namespace glm4::quant_detail

#pragma GCC pop_options
