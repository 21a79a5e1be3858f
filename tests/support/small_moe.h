// A small glm4_moe layer for the MoE decode tests: its config, and its weights filled with random
// values stored in one of the forms the products take (fp32, bf16, f16, 4- or 8-bit).
#pragma once
#include <cstdint>
#include <vector>

#include "autograd/compute_dtype.h"
#include "autograd/weight.h"
#include "model/config.h"
#include "model/moe_block.h"

namespace glm4::testing {

// fp32, and bf16 on this CPU's bf16 kernel when it has one.
std::vector<ComputeChoice> computes_to_test();

// hidden 256, 8 experts of 128, top 3, one shared expert, normalised top-k, scaling 1.7.
ModelConfig small_moe_config();

// An [N, K] matrix of randn(seed) * 0.05 as form 0 fp32, 1 bf16, 2 f16, 3 4-bit (group 64),
// else 8-bit (group 32); the quantized ones from the bf16 rounding.
Weight random_weight(int form, int64_t N, int64_t K, uint32_t seed);

// Every matrix of `block` as random_weight(form), vectors randn * 0.1 in fp32; seeds from 100 in
// visiting order.
void fill_moe_block(MoeBlock& block, int form);

}  // namespace glm4::testing
