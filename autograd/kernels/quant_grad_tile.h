// The input gradient of a quantized product at training sizes on AVX-512, one output tile at a
// time: W's rows dequantized into 32-column panels and multiplied by dY's rows with a 6 x 32
// register block of fp32 FMAs. quant_linear.cpp runs it on each tile of its plan where the
// active kernels provide it and dY has few rows (a routed expert's tokens); elsewhere it hands
// dequantized tiles to sgemm.
#pragma once
#include <cstdint>

#include "autograd/kernels/quantized_matrix.h"

namespace glm4::quant_detail {

// dX[m * K + c] (+)= sum_n dY[m * N + n] deq(W)[n, c] for m in [m0, m1), c in [c0, c1), with
// N = W.rows and K = W.cols; c0 and c1 multiples of the group size (c1 may be K). Each sum runs
// over n in order, so the result depends on neither the tile nor the thread.
void input_grad_tile_avx512(const float* dY, const QuantizedMatrix& W, int64_t m0, int64_t m1,
                            int64_t c0, int64_t c1, float* dX, bool accumulate);

}  // namespace glm4::quant_detail
