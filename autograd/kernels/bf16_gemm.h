// bf16 products of a linear layer on the CPU's bf16 units (AMX tiles or AVX512-BF16 dot
// products) for a row-major bf16 weight W[N, K]: fp32 activations in, fp32 out. The activation
// is rounded to bf16 (nearest even) per call, products are summed in fp32 in an order fixed by
// the shapes alone, so results do not depend on the thread count. The weight is read in place
// (the mmapped file pages stay its only copy); panels are repacked per task in a small buffer.
#pragma once
#include <cstdint>

#include "autograd/kernels/kernel_selection.h"
#include "autograd/kernels/quantized_matrix.h"

namespace glm4::kernels {

// Whether this CPU (and OS) can run `kernel`; kNone always can. Which one runs is chosen in
// kernel_selection.h; whether a product goes to it, by the caller's ComputeChoice
// (autograd/compute_dtype.h).
bool bf16_kernel_available(Bf16Kernel kernel);

// Y[M, N] (+)= X[M, K] W[N, K]^T, W row-major bf16 (row stride K).
void bf16_linear_forward(Bf16Kernel kernel, const float* X, int64_t M, int64_t K, const uint16_t* W,
                         int64_t N, float* Y, bool accumulate);

// dX[M, K] (+)= dY[M, N] W[N, K]: the input gradient of bf16_linear_forward, same weight.
void bf16_linear_input_grad(Bf16Kernel kernel, const float* dY, int64_t M, int64_t N,
                            const uint16_t* W, int64_t K, float* dX, bool accumulate);

// The same two products for a weight in mlx's affine format (prefill and training sizes; decode
// sizes stream the codes in quant_linear.h instead): each task dequantizes only its own weight
// panel (fma(scale, code, bias) in fp32, rounded to bf16) just before packing it, so no whole
// dequantized matrix ever exists.
void bf16_quant_linear_forward(Bf16Kernel kernel, const float* X, int64_t M, int64_t K,
                               const QuantizedMatrix& W, float* Y, bool accumulate);
void bf16_quant_linear_input_grad(Bf16Kernel kernel, const float* dY, int64_t M, int64_t N,
                                  const QuantizedMatrix& W, float* dX, bool accumulate);

// The same two products for a row-major f16 weight W[N, K] (prefill and training sizes): each
// task widens its own panel and rounds it to bf16, so the result is the bf16 product on W
// rounded to bf16 (what --compute bf16 asks for; f16 keeps 3 more mantissa bits).
void bf16_f16_linear_forward(Bf16Kernel kernel, const float* X, int64_t M, int64_t K,
                             const uint16_t* W, int64_t N, float* Y, bool accumulate);
void bf16_f16_linear_input_grad(Bf16Kernel kernel, const float* dY, int64_t M, int64_t N,
                                const uint16_t* W, int64_t K, float* dX, bool accumulate);

}  // namespace glm4::kernels
