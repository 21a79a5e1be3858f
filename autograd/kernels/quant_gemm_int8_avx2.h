// The AVX2 form of quant_gemm_int8.h's GEMM, which int8_gemm_rows runs under
// Int8Isa::kAvx2.
#pragma once
#include <cstdint>

#include "autograd/kernels/quant_gemm_int8.h"

namespace glm4::quant_detail {

// int8_gemm_rows for a 4- or 8-bit W (the 8-bit one with `in.levels16`).
void int8_gemm_rows_avx2(const QuantizedMatrix& W, const Int8DecodeInput& in, int64_t M, int64_t n0,
                         int64_t n1, float* Y, int64_t ldy);

}  // namespace glm4::quant_detail
