// DoRA (weight-decomposed LoRA) with PEFT's semantics. With V = W + scale * B A and
// g = m / ||V||_row (the L2 norm of each output row, a constant in backward):
//   y = x W^T + b + (g - 1) * (x_d W^T) + g * scale * (x_d A^T) B^T,   x_d = dropout(x)
// which without dropout is g * (x V^T) + b. m starts as ||W||_row (B = 0), so step 0 is the base.
// mlx-lm's DoRALinear differs only under dropout: it scales x W^T, not x_d W^T, by g.
#pragma once
#include <vector>

#include "model/linear.h"

namespace glm4 {

// W + scale * B A as fp32 [out, in]; for DoRA each row is then scaled by m / ||row||: the
// weight a fused model stores.
Tensor adapted_weight(const Param& weight, const LoraWeights& lora);
// ||W + scale * B A|| of each output row (fp32 values, accumulated in double).
std::vector<float> dora_weight_norm(const Param& weight, const LoraWeights& lora);
// m = ||W|| per row, trainable: DoRA's magnitude for a fresh adapter.
Tensor dora_initial_magnitude(const Param& weight);
// The DoRA layer output above; `x_dropped` is x itself when dropout is off. The products with W
// run as `compute` says.
Tensor dora_forward(const Tensor& x, const Tensor& x_dropped, const Param& weight,
                    const Tensor& bias, const LoraWeights& lora, const ComputeChoice& compute);

}  // namespace glm4
