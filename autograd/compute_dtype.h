// The process-wide compute dtype of the frozen-weight products: F32 (the default) widens bf16 /
// f16 weights and multiplies in fp32; BF16 sends bf16 weights to the bf16 kernels
// (autograd/kernels/bf16_gemm.h) where the CPU has them, rounding activations to bf16.
#pragma once
#include <cstdint>

namespace glm4 {

enum class ComputeDType { F32, BF16 };

// Under BF16 compute, bf16_max_rows is the most rows a product may have and still go to the bf16
// kernels; larger ones take the fp32 path on the same weight (bf16, f16 or quantized).
// `--compute auto` lowers it where the bf16 units only pay at decode sizes. Both settings change
// together, so setting the dtype alone also lifts the row limit.
constexpr int64_t kBf16AllRows = INT64_MAX;
void set_compute_dtype(ComputeDType dtype, int64_t bf16_max_rows = kBf16AllRows);
ComputeDType compute_dtype();
int64_t bf16_max_rows();
const char* compute_dtype_name(ComputeDType dtype);  // "f32", "bf16"

}  // namespace glm4
