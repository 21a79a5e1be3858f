// The process-wide compute dtype of the frozen-weight products: F32 (the default) widens bf16 /
// f16 weights and multiplies in fp32; BF16 sends bf16 weights to the bf16 kernels
// (autograd/kernels/bf16_gemm.h) where the CPU has them, rounding activations to bf16.
#pragma once

namespace glm4 {

enum class ComputeDType { F32, BF16 };

void set_compute_dtype(ComputeDType dtype);
ComputeDType compute_dtype();
const char* compute_dtype_name(ComputeDType dtype);  // "f32", "bf16"

}  // namespace glm4
