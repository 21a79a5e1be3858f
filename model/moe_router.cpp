#include "model/moe_router.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "base/check.h"
#include "base/parallel.h"

namespace glm4 {

namespace {
// The `k` best of `values` (indices, best first; equal values: the lower index first).
void top_k(const float* values, int64_t n, int64_t k, int32_t* out, std::vector<int32_t>& order) {
  order.resize(size_t(n));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [values](int32_t a, int32_t b) {
    return values[a] > values[b] || (values[a] == values[b] && a < b);
  });
  std::copy(order.begin(), order.begin() + k, out);
}
}  // namespace

RouterSettings RouterSettings::of(const ModelConfig& c) {
  return {c.n_routed_experts,
          c.num_experts_per_tok,
          c.n_group,
          c.topk_group,
          c.norm_topk_prob,
          c.routed_scaling_factor,
          c.family == ModelConfig::Family::Glm4MoeLite};
}

MoeRoute select_experts(const float* scores, int64_t tokens, const float* bias,
                        const RouterSettings& c) {
  const int64_t E = c.experts, k = c.top_k, G = c.n_group;
  const int64_t per = E / G;
  GLM4_CHECK(E > 0 && k > 0 && k <= E && G > 0 && E % G == 0 && per >= 2 && c.topk_group <= G,
             "[moe] router settings: ", E, " experts, top ", k, ", ", G, " groups, keep ",
             c.topk_group);
  MoeRoute r;
  r.tokens = tokens;
  r.k = k;
  r.experts.resize(size_t(tokens * k));
  const float dropped = c.dropped_groups_neg_inf ? -std::numeric_limits<float>::infinity() : 0.0f;
  parallel_for(tokens, 16, [&](int64_t lo, int64_t hi) {
    std::vector<float> choice(static_cast<size_t>(E)), group_score(static_cast<size_t>(G));
    std::vector<int32_t> order, kept(static_cast<size_t>(c.topk_group)), pair(2);
    for (int64_t t = lo; t < hi; ++t) {
      const float* s = scores + t * E;
      for (int64_t e = 0; e < E; ++e) choice[size_t(e)] = s[e] + bias[e];
      if (c.topk_group < G) {
        for (int64_t g = 0; g < G; ++g) {
          top_k(choice.data() + g * per, per, 2, pair.data(), order);
          group_score[size_t(g)] =
              choice[size_t(g * per + pair[0])] + choice[size_t(g * per + pair[1])];
        }
        top_k(group_score.data(), G, c.topk_group, kept.data(), order);
        std::vector<bool> keep(size_t(G), false);
        for (int32_t g : kept) keep[size_t(g)] = true;
        for (int64_t e = 0; e < E; ++e)
          if (!keep[size_t(e / per)]) choice[size_t(e)] = dropped;  // as upstream masks them
      }
      top_k(choice.data(), E, k, r.experts.data() + t * k, order);
    }
  });
  r.slots.assign(size_t(E), {});
  for (int64_t i = 0; i < tokens * k; ++i) r.slots[size_t(r.experts[size_t(i)])].push_back(i);
  return r;
}

}  // namespace glm4
