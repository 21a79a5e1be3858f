// Decode-sized products (M <= kQuantStreamRows) with a 4- or 8-bit weight on the int8 dot
// products of AVX512-VNNI (vpdpbusd: 64 byte products a instruction, against 16 for an fp32
// fma), used under --compute bf16. Each group of X is written as two int8 levels,
//   x ~= unit * (256 * q1 + q2),  unit = max|x| / (127 * 256),  |q1|, |q2| <= 127,
// so an element is off by at most about max|x| / 65000 of its group (bf16 rounding: x / 256),
// and the codes multiply both levels exactly in int32:
//   y = sum_g scale_g * unit_g * sum_{c in g} code_c (256 q1_c + q2_c)  +  sum_g bias_g * sum_{c in
//   g} x_c
// with the bias term on the fp32 sum of X.
#pragma once
#include <cstdint>
#include <vector>

#include "autograd/kernels/quantized_matrix.h"

namespace glm4::quant_detail {

// Whether int8_decode_rows runs for `bits` on this CPU: AVX512-VNNI and AVX512-BW, the avx512
// quantized kernels selected (not GLM4_QUANT_KERNEL=avx2 or scalar); 4 or 8 bits.
bool int8_decode_supported(int bits);

// X [M, K] as int8_decode_rows reads it, in steps of 128 columns (zero-padded): for 4 bits a
// step's 64 even columns, then its 64 odd ones (the nibble order of the codes), each column
// within those in the byte order vpdpbusd pairs with the codes; 8 bits in column order.
struct Int8DecodeInput {
  int64_t cols = 0;            // K rounded up to a multiple of 128
  int64_t groups = 0;          // groups rounded up to a multiple of 16
  std::vector<int8_t> q1, q2;  // [M, cols]
  std::vector<float> units;    // [M, groups]: the unit of each group, zero past the last
  std::vector<float> sums;     // [M, groups]: fp32 sum of X over each group, zero past the last
};
// kColumns keeps every step in column order (what int8_gemm_rows reads, for either width).
enum class Int8Layout { kDecode, kColumns };
// False (and `in` unusable) when X holds a non-finite value: the caller takes the fp32 kernels.
bool prepare_int8_decode_input(const QuantizedMatrix& W, const float* X, int64_t M,
                               Int8DecodeInput& in, Int8Layout layout = Int8Layout::kDecode);

// Y[m * ldy + n] (+)= sum_k X[m0 + m, k] deq(W)[n, k] (X as prepared) for m < M <=
// kDecodeMaxM and n in [n0, n1). Each output is one fixed-order sum, whatever n0 and n1 are.
void int8_decode_rows(const QuantizedMatrix& W, const Int8DecodeInput& in, int64_t m0, int64_t M,
                      int64_t n0, int64_t n1, float* Y, int64_t ldy, bool accumulate);

}  // namespace glm4::quant_detail
