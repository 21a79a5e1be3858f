// Products of fp32 activations with a frozen weight in mlx's affine format (quantized_matrix.h),
// never materialising the whole dequantized matrix. Every weight value is fma(scale, code, bias)
// in fp32, so the result is an fp32 product with those values. Results do not depend on the
// thread count.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/kernels/quantized_matrix.h"

namespace glm4 {

// Rows of X up to which quant_linear_forward streams the packed codes (decode, small batches);
// linear_forward sends larger products under bf16 compute to the bf16 kernels instead.
inline constexpr int64_t kQuantStreamRows = 32;

// Y[M, N] (+)= X[M, K] deq(W)^T with W [N, K]. Up to kQuantStreamRows rows (decode, small batches)
// the packed codes are streamed, 4 rows of X a pass, and dequantized in registers; more rows
// (prefill) dequantize tiles of W into a thread-local fp32 buffer for the sgemm tiles of gemm.h.
void quant_linear_forward(const float* X, int64_t M, int64_t K, const QuantizedMatrix& W, float* Y,
                          bool accumulate);

// Whether quant_linear_forward_int8 runs W on this CPU with the selected quantized kernels
// (AVX512-VNNI or AVX2, 4- or 8-bit codes; on AVX512-VNNI CPUs with AVX512-VBMI 2, 3, 5 and 6 bits
// too, whose prefill sizes it hands to quant_linear_forward).
bool quant_int8_supported(const QuantizedMatrix& W);
// Whether codes of `bits` decode on the int8 kernels here (the others on the fp32 ones, several
// times slower a byte).
bool quant_int8_decodes(int bits);
// Whether it runs on this CPU at all (for 4-bit codes), decode and prefill sizes alike.
bool quant_int8_available();
// The product under --compute bf16 on int8 dot products: X in two int8 levels per group (each
// element within about max|x| / 65000 of its group: 256 times finer than bf16 rounding), the
// codes multiplied exactly (quant_decode_int8.h). Up to kQuantStreamRows rows the codes are
// streamed (decode); more rows (prefill, where no bf16 units take them) unpack tiles of the codes
// for an int8 GEMM (quant_gemm_int8.h). X holding inf or NaN goes to the fp32 kernels. Throws
// unless supported.
void quant_linear_forward_int8(const float* X, int64_t M, int64_t K, const QuantizedMatrix& W,
                               float* Y, bool accumulate);

// dX[M, K] (+)= dY[M, N] deq(W): the input gradient of quant_linear_forward (QLoRA's backward).
void quant_linear_input_grad(const float* dY, int64_t M, int64_t N, const QuantizedMatrix& W,
                             float* dX, bool accumulate);

// The instruction set of the quantized kernels in use ("avx512", "avx2" or "scalar"):
// kernel_selection().quant, unless set_quant_kernel replaced it for the rest of the process.
// set_quant_kernel is a hook for the tests and benchmarks that run every instruction set in
// turn; it throws if the CPU cannot run the named kernels.
const char* quant_kernel_name();
void set_quant_kernel(std::string_view name);
std::vector<std::string> quant_kernels_supported();

}  // namespace glm4
