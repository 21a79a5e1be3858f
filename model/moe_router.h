// The glm4_moe router's choice of experts, taken without a gradient (as transformers does under
// no_grad): choice = sigmoid scores + e_score_correction_bias; n_group groups scored by the sum of
// their two best choices, the best topk_group kept and the others' choices set to 0.0 (-inf for
// glm4_moe_lite); the num_experts_per_tok best choices win (ties to the lower expert id).
#pragma once
#include <cstdint>
#include <vector>

#include "model/config.h"

namespace glm4 {

// The router's numbers from the config.
struct RouterSettings {
  int64_t experts = 0, top_k = 0, n_group = 1, topk_group = 1;
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  bool dropped_groups_neg_inf = false;  // glm4_moe_lite masks dropped groups to -inf, not 0.0
  static RouterSettings of(const ModelConfig& c);
};

struct MoeRoute {
  int64_t tokens = 0, k = 0;
  std::vector<int32_t> experts;  // [tokens * k]: each token's experts, best choice first
  // For each expert, the positions token * k + slot routed to it, tokens ascending: one product
  // per expert over exactly these tokens.
  std::vector<std::vector<int64_t>> slots;
};

// scores [tokens, experts] (after the sigmoid), bias [experts].
MoeRoute select_experts(const float* scores, int64_t tokens, const float* bias,
                        const RouterSettings& c);

}  // namespace glm4
