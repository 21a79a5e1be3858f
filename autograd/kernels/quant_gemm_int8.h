// Prefill-sized products (more rows than kQuantStreamRows) with a 4- or 8-bit weight on the int8
// dot products of AVX512-VNNI (on AVX2 vpmaddubsw for 4 bits, vpmaddwd for 8:
// quant_gemm_int8_avx2.cpp), under
// --compute bf16 where no bf16 units take them (a CPU without AVX512-BF16 or AMX). X is in the two
// int8 levels of quant_decode_int8.h, in column order, so the error bound is the decode kernel's.
// The weight's codes are unpacked to one byte each for 32 rows and 512 columns at a time into a
// per-thread buffer, four consecutive codes of a row to a 32-bit lane, so that one vpdpbusd
// multiplies 16 rows by four values of X broadcast; sums run in int32 over a group and are scaled
// once a group. Nothing of W is kept: each call reads the stored codes once.
#pragma once
#include <cstdint>

#include "autograd/kernels/quant_decode_int8.h"
#include "autograd/kernels/quantized_matrix.h"

namespace glm4::quant_detail {

// Rows of W a task of int8_gemm_rows starts on (n0 a multiple of it).
constexpr int64_t kInt8GemmRows = 32;

// Y[m * ldy + n] = sum_k X[m, k] deq(W)[n, k] for every m < M and n in [n0, n1), with `in` from
// prepare_int8_decode_input(..., Int8Layout::kColumns). Needs int8_supported(W.bits, isa).
// Each output is one fixed-order sum, whatever n0 and n1 are (written a 512-column block at a
// time, so a caller that accumulates adds the finished product); both ISAs give the same bits.
void int8_gemm_rows(const QuantizedMatrix& W, const Int8DecodeInput& in, int64_t M, int64_t n0,
                    int64_t n1, float* Y, int64_t ldy, Int8Isa isa = int8_isa());

}  // namespace glm4::quant_detail
