// Internal to the quantized kernels: one table of entry points per instruction set (AVX-512,
// AVX2 + FMA, portable C++), each in its own file, and the run-time choice among them.
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "autograd/kernels/quantized_matrix.h"

namespace glm4::quant_detail {

// Rows of X one forward_rows call takes (quant_linear.cpp makes passes of this many rows).
constexpr int64_t kDecodeMaxM = 4;

struct QuantKernels {
  const char* name;  // "avx512", "avx2" or "scalar"
  // xp[M, K] = X[M, K] reordered within each block of columns the way forward_rows reads it
  // for `bits` (the identity for most widths).
  void (*prepare_x)(int bits, const float* X, int64_t M, int64_t K, float* xp);
  // Y[m * ldy + n] (+)= sum_k X[m, k] deq(W)[n, k] for n in [n0, n1), m < M <= kDecodeMaxM,
  // with xp from prepare_x. Each output is one fixed-order sum, whatever n0 and n1 are.
  void (*forward_rows)(const QuantizedMatrix& W, const float* xp, int64_t M, int64_t n0, int64_t n1,
                       float* Y, int64_t ldy, bool accumulate);
  // out[j] = fma(scale, code, bias) for columns [c0, c0 + count) of row r; c0 and count are
  // multiples of the group size.
  void (*dequant_row)(const QuantizedMatrix& W, int64_t r, int64_t c0, int64_t count, float* out);
  // dX[m * W.cols + c] (+)= sum_n dY[m * W.rows + n] deq(W)[n, c] for c in [c0, c1) (multiples of
  // the group size), m < M <= kDecodeMaxM, each sum over n in order. False (or null) where this
  // set has no such kernel for W's width: quant_linear.cpp then widens W row by row.
  bool (*input_grad_stripe)(const float* dY, int64_t M, const QuantizedMatrix& W, int64_t c0,
                            int64_t c1, float* dX, bool accumulate) = nullptr;
  // dX[m * W.cols + c] (+)= sum_n dY[m * W.rows + n] deq(W)[n, c] for m in [m0, m1) and c in
  // [c0, c1) (multiples of the group size, or W.cols), each sum over n in order: one tile of a
  // training-sized input gradient. Null where this set has none: quant_linear.cpp then runs sgemm
  // on dequantized tiles.
  void (*input_grad_tile)(const float* dY, const QuantizedMatrix& W, int64_t m0, int64_t m1,
                          int64_t c0, int64_t c1, float* dX, bool accumulate) = nullptr;
};

const QuantKernels& scalar_kernels();
const QuantKernels& avx2_kernels();
const QuantKernels& avx512_kernels();

// Whether this CPU (and OS) can run the kernels called `name`.
bool cpu_supports(const char* name);
// The kernels in use: kernel_selection().quant (the best this CPU runs, or GLM4_QUANT_KERNEL),
// or the last set_quant_kernel().
const QuantKernels& active();

// Scales (or biases) of groups [g0, g0 + count) of row r widened to fp32.
void load_group_params(const QuantizedMatrix& W, const void* params, int64_t r, int64_t g0,
                       int64_t count, float* out);

// Rows ahead that a kernel walking R rows of `row_bytes` codes together, column by column,
// prefetches: whole blocks of R rows, the fewest that reach 8 KiB. Each line is then fetched into
// L1 one or more blocks before its block reads it. A fixed byte distance does not do that where
// the rows' length does not divide it (8 or 16 KiB past a 13,696-wide down_proj row's column
// lands on lines its block is reading or has read), and the scales and biases, two more streams
// the hardware prefetchers miss, need the same distance in rows. On a 9B layer's shapes in 2 MB
// pages, one thread (Zen 5): 4,096-wide rows 1.3-1.4x and 13,696-wide 1.5x the rate of 16 KiB
// ahead into L2 with the scales left to the hardware.
inline int64_t prefetch_rows_ahead(int R, int64_t row_bytes) {
  constexpr int64_t kAheadBytes = 8192;
  const int64_t block = R * row_bytes;
  return R * std::max<int64_t>(1, (kAheadBytes + block - 1) / block);
}

// Prefetches one line into L1 (a hint only: addresses past the end of the codes are fine).
inline void prefetch_l1(const void* p) { __builtin_prefetch(p, 0, 3); }

// The lines holding group g0's scale and bias of row r, into L1 (the hardware prefetchers leave
// these two small streams to miss): a kernel asks for rows prefetch_rows_ahead on.
inline void prefetch_params_l1(const QuantizedMatrix& W, int64_t r, int64_t g0, int64_t groups) {
  const int64_t offset = (r * groups + g0) * int64_t(dtype_size(W.scale_dtype));
  prefetch_l1(static_cast<const uint8_t*>(W.scales) + offset);
  prefetch_l1(static_cast<const uint8_t*>(W.biases) + offset);
}

// fn(std::integral_constant<int, M>{}) for M of 1 to 4: the input rows of a decode product, a
// compile-time count inside the int8 decode kernels (AVX-512 and AVX2 alike).
template <typename Fn>
void with_input_rows(int64_t M, Fn&& fn) {
  switch (M) {
    case 1:
      return fn(std::integral_constant<int, 1>{});
    case 2:
      return fn(std::integral_constant<int, 2>{});
    case 3:
      return fn(std::integral_constant<int, 3>{});
    case 4:
      return fn(std::integral_constant<int, 4>{});
  }
}

}  // namespace glm4::quant_detail
