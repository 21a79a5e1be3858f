// Decode-sized products (M <= kQuantStreamRows) with a 4- or 8-bit weight on the int8 dot
// products of AVX512-VNNI (vpdpbusd: 64 byte products a instruction, against 16 for an fp32
// fma; on AVX2, vpmaddubsw for 4 bits and vpmaddwd for 8), used under --compute bf16. Each group of
// X is written as two int8 levels,
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

// The instruction set the int8 kernels use, for 4- and 8-bit codes, decode and the int8 GEMM of
// quant_gemm_int8.h: AVX512-VNNI or AVX2 (quant_decode_int8_avx2.cpp, quant_gemm_int8_avx2.cpp).
enum class Int8Isa { kNone, kAvx2, kAvx512Vnni };

// This process's: the one of the selected quantized kernels (kernel_selection().quant; so
// GLM4_QUANT_KERNEL=avx2 takes the AVX2 form on an AVX-512 CPU, and scalar none), when the CPU
// has it (AVX512-VNNI and AVX512-BW for avx512).
Int8Isa int8_isa();
// Whether this CPU runs `isa`'s kernels.
bool int8_isa_runs(Int8Isa isa);

// Whether the int8 kernels run for `bits` under `isa`: decode (int8_decode_rows) 4- and 8-bit
// codes on both, and 2, 3, 5 and 6 bits on AVX512-VNNI CPUs with AVX512-VBMI too; the GEMM
// (int8_gemm_rows of quant_gemm_int8.h) 4 and 8 bits only (int8_gemm_supported).
bool int8_supported(int bits, Int8Isa isa = int8_isa());
bool int8_gemm_supported(int bits, Int8Isa isa = int8_isa());

inline constexpr float kInt8Level = 127.0f;        // largest |q1| and |q2|
inline constexpr float kInt8SecondLevel = 256.0f;  // q2 counts in units 256 times finer than q1

// X [M, K] as int8_decode_rows reads it, in steps of 128 columns (zero-padded): for 4 bits a
// step's 64 even columns, then its 64 odd ones (the nibble order of the codes), each column
// within those in the byte order vpdpbusd pairs with the codes; 8 bits in column order.
struct Int8DecodeInput {
  int64_t cols = 0;            // K rounded up to a multiple of 128
  int64_t groups = 0;          // groups rounded up to a multiple of 16
  std::vector<int8_t> q1, q2;  // [M, cols]
  std::vector<float> units;    // [M, groups]: the unit of each group, zero past the last
  std::vector<float> sums;     // [M, groups]: fp32 sum of X over each group, zero past the last
  // [M, cols]: 256 q1 + q2 in one int16, for the AVX2 kernels of 8-bit codes (empty otherwise):
  // in column order for kDecode; for kColumns every 4 columns k..k+3 as k, k+2, k+1, k+3, the
  // int16 pairs vpmaddwd meets in the GEMM's tiles.
  std::vector<int16_t> levels16;
};
// Row m of a prepared input: what a kernel reads of it.
struct Int8InputRow {
  const int8_t* q1;
  const int8_t* q2;
  const float* units;
  const float* sums;
};
inline Int8InputRow int8_input_row(const Int8DecodeInput& in, int64_t m) {
  return {in.q1.data() + m * in.cols, in.q2.data() + m * in.cols, in.units.data() + m * in.groups,
          in.sums.data() + m * in.groups};
}
// kColumns keeps every step in column order (what int8_gemm_rows reads, for either width).
enum class Int8Layout { kDecode, kColumns };
// False (and `in` unusable) when X holds a non-finite value: the caller takes the fp32 kernels.
bool prepare_int8_decode_input(const QuantizedMatrix& W, const float* X, int64_t M,
                               Int8DecodeInput& in, Int8Layout layout = Int8Layout::kDecode,
                               Int8Isa isa = int8_isa());

// Where column c of X goes in a prepared row: for 4 bits (kDecode) byte p of a 128-column step's
// codes holds columns 2p (low nibble) and 2p + 1 (high), so the step's even columns come first.
inline int64_t int8_input_position(int bits, int64_t c) {
  if (bits != 4) return c;
  const int64_t base = c / 128 * 128, i = c % 128;
  return base + (i % 2) * 64 + i / 2;
}

// Y[m * ldy + n] (+)= sum_k X[m0 + m, k] deq(W)[n, k] (X as prepared) for m < M <=
// kDecodeMaxM and n in [n0, n1). Each output is one fixed-order sum, whatever n0 and n1 are.
void int8_decode_rows(const QuantizedMatrix& W, const Int8DecodeInput& in, int64_t m0, int64_t M,
                      int64_t n0, int64_t n1, float* Y, int64_t ldy, bool accumulate,
                      Int8Isa isa = int8_isa());
// The AVX-512 form for 2, 3, 5 and 6 bits (quant_decode_int8_packed.cpp, AVX512-VBMI).
void int8_decode_rows_packed(const QuantizedMatrix& W, const Int8DecodeInput& in, int64_t m0,
                             int64_t M, int64_t n0, int64_t n1, float* Y, int64_t ldy,
                             bool accumulate);

}  // namespace glm4::quant_detail
