// The AVX2 forms of quant_decode_int8.cpp's kernels, which int8_decode_rows and
// prepare_int8_decode_input run under Int8Isa::kAvx2.
#pragma once
#include <cstdint>

#include "autograd/kernels/quant_decode_int8.h"

namespace glm4::quant_detail {

// Columns [c0, c0 + count) of a row of X (one group; count a multiple of 32) into both levels at
// their int8_input_position()s; *sum gets the fp32 sum and *unit the group's unit. False on inf
// or NaN.
bool quantize_group_avx2(int bits, const float* x, int64_t count, int64_t c0, int8_t* q1,
                         int8_t* q2, float* sum, float* unit);

// int8_decode_rows for a 4- or 8-bit W (the 8-bit one with `in.levels16`).
void int8_decode_rows_avx2(const QuantizedMatrix& W, const Int8DecodeInput& in, int64_t m0,
                           int64_t M, int64_t n0, int64_t n1, float* Y, int64_t ldy,
                           bool accumulate);

}  // namespace glm4::quant_detail
