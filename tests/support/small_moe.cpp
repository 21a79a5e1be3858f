#include "tests/support/small_moe.h"

#include <string>
#include <vector>

#include "autograd/kernels/kernel_selection.h"
#include "autograd/weight_quantize.h"
#include "tests/support/random_values.h"

namespace glm4::testing {

std::vector<ComputeChoice> computes_to_test() {
  std::vector<ComputeChoice> out{kF32Compute};
  if (kernels::bf16_kernel() != kernels::Bf16Kernel::kNone)
    out.push_back(bf16_compute(kernels::bf16_kernel()));
  return out;
}

ModelConfig small_moe_config() {
  ModelConfig c;
  c.family = ModelConfig::Family::Glm4Moe;
  c.hidden_size = 256;
  c.n_routed_experts = 8;
  c.num_experts_per_tok = 3;
  c.moe_intermediate_size = 128;
  c.n_shared_experts = 1;
  c.norm_topk_prob = true;
  c.routed_scaling_factor = 1.7;
  return c;
}

Weight random_weight(int form, int64_t N, int64_t K, uint32_t seed) {
  std::vector<float> w = randn(size_t(N * K), seed, 0.05f);
  switch (form) {
    case 0:
      return Weight::from_f32(w.data(), N, K, DType::F32);
    case 1:
      return Weight::from_f32(w.data(), N, K, DType::BF16);
    case 2:
      return Weight::from_f32(w.data(), N, K, DType::F16);
    case 3:
      return quantize_weight(Weight::from_f32(w.data(), N, K, DType::BF16), {4, 64}, DType::BF16,
                             "w4");
    default:
      return quantize_weight(Weight::from_f32(w.data(), N, K, DType::BF16), {8, 32}, DType::BF16,
                             "w8");
  }
}

void fill_moe_block(MoeBlock& block, int form) {
  uint32_t seed = 100;
  block.visit("mlp", [&](const std::string&, Param& p) {
    if (p.shape.size() == 2) return p.assign(random_weight(form, p.shape[0], p.shape[1], seed++));
    std::vector<float> v = randn(size_t(p.shape[0]), seed++, 0.1f);
    p.assign(Weight::from_f32(v.data(), 1, p.shape[0]));
  });
}

}  // namespace glm4::testing
