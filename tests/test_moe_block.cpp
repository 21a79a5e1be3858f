// The Mixture-of-Experts block on its own: the router against a scalar loop, the grouped
// per-expert computation against every expert on every token, its gradients against central
// differences (through the routing weights into x and the router), and no gradient for an
// expert no token reaches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "model/forward_context.h"
#include "model/moe_block.h"
#include "tests/support/gradcheck.h"

namespace glm4 {
namespace {

// A scalar, loop-only router: the reference semantics (tools/reference/glm4_moe_model.py).
std::set<int32_t> scalar_route(const std::vector<float>& s, const std::vector<float>& bias,
                               const RouterSettings& r) {
  const int64_t E = r.experts, per = E / r.n_group;
  std::vector<float> choice(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) choice[size_t(e)] = s[size_t(e)] + bias[size_t(e)];
  std::vector<std::pair<float, int64_t>> groups;
  for (int64_t g = 0; g < r.n_group; ++g) {
    std::vector<float> v(choice.begin() + g * per, choice.begin() + (g + 1) * per);
    std::sort(v.rbegin(), v.rend());
    groups.push_back({v[0] + v[1], g});
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](auto& a, auto& b) { return a.first > b.first; });
  std::vector<bool> kept(size_t(r.n_group), false);
  for (int64_t i = 0; i < r.topk_group; ++i) kept[size_t(groups[size_t(i)].second)] = true;
  std::vector<std::pair<float, int32_t>> ranked;
  for (int64_t e = 0; e < E; ++e)
    ranked.push_back({kept[size_t(e / per)] ? choice[size_t(e)] : 0.0f, int32_t(e)});
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](auto& a, auto& b) { return a.first > b.first; });
  std::set<int32_t> out;
  for (int64_t i = 0; i < r.top_k; ++i) out.insert(ranked[size_t(i)].second);
  return out;
}

TEST(MoeRouter, GroupLimitAndBiasDecide) {
  RouterSettings r{8, 2, 4, 2, true, 1.0};
  // Groups {0,1} {2,3} {4,5} {6,7}. Expert 6 has the best score, but its group (0.91) is not one
  // of the best two (1.1, 1.13);
  // the bias lifts expert 3 (0.3 + 0.28) above expert 2 (0.55).
  const std::vector<float> scores{0.6f, 0.5f, 0.55f, 0.3f, 0.1f, 0.1f, 0.9f, 0.01f};
  const std::vector<float> bias{0, 0, 0, 0.28f, 0, 0, 0, 0};
  const MoeRoute route = select_experts(scores.data(), 1, bias.data(), r);
  EXPECT_EQ(route.experts, (std::vector<int32_t>{0, 3}));  // best choice first: 0.6 vs 0.5
  EXPECT_EQ(route.slots[0], (std::vector<int64_t>{0}));
  EXPECT_EQ(route.slots[3], (std::vector<int64_t>{1}));
  EXPECT_TRUE(route.slots[6].empty());
}

TEST(MoeRouter, EqualsAScalarLoopOnRandomScores) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.0f, 1.0f), b(-0.2f, 0.2f);
  for (RouterSettings r : {RouterSettings{16, 4, 4, 2}, RouterSettings{16, 3, 1, 1},
                           RouterSettings{12, 5, 3, 2}, RouterSettings{8, 8, 2, 2}}) {
    const int64_t N = 300;
    std::vector<float> scores(size_t(N * r.experts)), bias(size_t(r.experts));
    for (float& v : scores) v = u(rng);
    for (float& v : bias) v = b(rng);
    const MoeRoute route = select_experts(scores.data(), N, bias.data(), r);
    std::vector<int64_t> per_expert(size_t(r.experts), 0);
    for (int64_t t = 0; t < N; ++t) {
      std::vector<float> row(scores.begin() + t * r.experts, scores.begin() + (t + 1) * r.experts);
      std::set<int32_t> ours(route.experts.begin() + t * r.top_k,
                             route.experts.begin() + (t + 1) * r.top_k);
      ASSERT_EQ(ours, scalar_route(row, bias, r)) << "token " << t;
      for (int32_t e : ours) ++per_expert[size_t(e)];
    }
    for (int64_t e = 0; e < r.experts; ++e) {
      const auto& slots = route.slots[size_t(e)];
      ASSERT_EQ(int64_t(slots.size()), per_expert[size_t(e)]);
      EXPECT_TRUE(std::is_sorted(slots.begin(), slots.end()));
      for (int64_t s : slots) EXPECT_EQ(route.experts[size_t(s)], e);
    }
  }
}

ModelConfig small_moe(int64_t n_group, int64_t topk_group, bool norm) {
  ModelConfig c;
  c.family = ModelConfig::Family::Glm4Moe;
  c.hidden_size = 6;
  c.n_routed_experts = 8;
  c.num_experts_per_tok = 3;
  c.moe_intermediate_size = 4;
  c.n_shared_experts = 1;
  c.n_group = n_group;
  c.topk_group = topk_group;
  c.norm_topk_prob = norm;
  c.routed_scaling_factor = 1.7;
  return c;
}

// Random frozen weights (fp32), a bias that moves some choices.
void fill(MoeBlock& m, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 0.5f);
  auto weight = [&](Param& p) {
    std::vector<float> v(size_t(shape_numel(p.shape)));
    for (float& x : v) x = n(rng);
    const bool matrix = p.shape.size() == 2;
    p.assign(Weight::from_f32(v.data(), matrix ? p.shape[0] : 1,
                              matrix ? p.shape[1] : int64_t(v.size())));
  };
  m.visit("mlp", [&](const std::string&, Param& p) { weight(p); });
}

Tensor swiglu_of(const SwigluMlp& m, const Tensor& x) {
  auto lin = [](const Linear& l, const Tensor& in) {
    return ops::linear(in, l.weight.frozen, Tensor(), kF32Compute);
  };
  return lin(m.down_proj, ops::mul(ops::silu(lin(m.gate_proj, x)), lin(m.up_proj, x)));
}

// The per-expert grouping equals computing every expert on every token, then masking and
// weighting (the reference's dense_check formulation).
TEST(MoeBlockTest, EqualsEveryExpertOnEveryTokenMasked) {
  for (bool norm : {true, false}) {
    MoeBlock m(small_moe(2, 1, norm));
    fill(m, 3);
    NoGradGuard no_grad;
    Tensor x = testing::random_tensor({2, 5, 6}, 11);
    ForwardContext ctx;
    std::vector<RouterTrace> traces;
    ctx.router_traces = &traces;
    const Tensor ours = m.forward(x, ctx);
    ASSERT_EQ(traces.size(), 1u);
    const Tensor flat = ops::reshape(x, {10, 6});
    std::vector<float> want = swiglu_of(m.shared_experts, flat).to_vector();
    for (int64_t e = 0; e < 8; ++e) {
      const Tensor y = swiglu_of(m.experts[size_t(e)], flat);  // [10, 6]
      for (int64_t t = 0; t < 10; ++t)
        for (int64_t j = 0; j < 3; ++j) {
          if (traces[0].experts[size_t(t * 3 + j)] != e) continue;
          const float w = traces[0].weights.data()[t * 3 + j];
          for (int64_t h = 0; h < 6; ++h) want[size_t(t * 6 + h)] += w * y.data()[t * 6 + h];
        }
    }
    double worst = 0;
    for (int64_t i = 0; i < ours.numel(); ++i)
      worst = std::max(worst, double(std::abs(ours.data()[i] - want[size_t(i)])));
    EXPECT_LE(worst, 1e-5) << "norm_topk_prob " << norm;
    // The weights: sigmoid scores of the chosen experts, normalised when asked, scaled.
    for (int64_t t = 0; t < 10; ++t) {
      double sum = 0;
      for (int64_t j = 0; j < 3; ++j)
        sum += 1.0 /
               (1.0 + std::exp(-double(
                          traces[0].logits.data()[t * 8 + traces[0].experts[size_t(t * 3 + j)]])));
      for (int64_t j = 0; j < 3; ++j) {
        const double s =
            1.0 /
            (1.0 + std::exp(-double(
                       traces[0].logits.data()[t * 8 + traces[0].experts[size_t(t * 3 + j)]])));
        EXPECT_NEAR(traces[0].weights.data()[t * 3 + j], (norm ? s / sum : s) * 1.7, 1e-5);
      }
    }
  }
}

// Gradients through the block, into x and the router weight (through the routing weights, the
// selection held fixed), against central differences.
TEST(MoeBlockTest, GradientsMatchFiniteDifferences) {
  for (bool norm : {true, false}) {
    auto block = std::make_shared<MoeBlock>(small_moe(4, 2, norm));
    fill(*block, 5);
    testing::GradCase c{norm ? "moe_block_norm" : "moe_block",
                        {{7, 6}, {8, 6}},
                        [block](const std::vector<Tensor>& in) {
                          block->gate.weight.value = in[1];
                          return block->forward(in[0], ForwardContext{});
                        },
                        2e-2,
                        1e-3f};
    const std::string report = testing::check_gradients(c, 2);
    EXPECT_TRUE(report.empty()) << report;
  }
}

// An expert no token reaches runs no product: its adapters get no gradient, the others do.
TEST(MoeBlockTest, UnreachedExpertsGetNoGradient) {
  MoeBlock m(small_moe(1, 1, true));
  fill(m, 9);
  std::mt19937_64 rng(1);
  m.visit_linears("mlp", 0, [&](const LinearSite&, Linear& l) { l.add_lora(2, 1.0f, 0.0f, rng); });
  Tensor x = testing::random_tensor({1, 2, 6}, 4);  // 2 tokens x 3 experts: at most 6 of 8 reached
  ForwardContext ctx;
  std::vector<RouterTrace> traces;
  ctx.router_traces = &traces;
  backward(ops::sum(m.forward(x, ctx)));
  std::set<int32_t> reached(traces[0].experts.begin(), traces[0].experts.end());
  ASSERT_LT(reached.size(), 8u);
  for (size_t e = 0; e < m.experts.size(); ++e) {
    const bool r = reached.count(int32_t(e)) > 0;
    EXPECT_EQ(m.experts[e].gate_proj.lora->lora_B.grad().defined(), r) << "expert " << e;
    EXPECT_EQ(m.experts[e].down_proj.lora->lora_A.grad().defined(), r) << "expert " << e;
  }
  EXPECT_TRUE(m.shared_experts.up_proj.lora->lora_B.grad().defined());
}

}  // namespace
}  // namespace glm4
