#include "model/moe_block.h"

#include <algorithm>

#include "autograd/ops.h"
#include "base/check.h"
#include "model/forward_context.h"

namespace glm4 {

namespace {
// Dropout slots of the shared experts; each routed expert draws from a seed of its own.
constexpr int kSharedSlot = 7;
constexpr int kExpertSlot = 0;
}  // namespace

AdapterRows MoeBlock::rows_of(const AdapterRows& all, const std::vector<int64_t>& tokens) {
  AdapterRows sub;
  sub.slots = all.slots;
  for (int64_t off : all.offsets)
    sub.offsets.push_back(std::lower_bound(tokens.begin(), tokens.end(), off) - tokens.begin());
  return sub;
}

MoeBlock::MoeBlock(const ModelConfig& c)
    : router(RouterSettings::of(c)),
      shared_experts(c.hidden_size, c.moe_intermediate_size * c.n_shared_experts, kSharedSlot) {
  gate.weight.shape = {c.n_routed_experts, c.hidden_size};
  gate.e_score_correction_bias.shape = {c.n_routed_experts};
  experts.reserve(size_t(c.n_routed_experts));
  for (int64_t e = 0; e < c.n_routed_experts; ++e)
    experts.emplace_back(c.hidden_size, c.moe_intermediate_size, kExpertSlot);
}

Tensor MoeBlock::routing_weights(const Tensor& scores, const MoeRoute& route) const {
  Tensor w = ops::gather_last(scores, route.experts, route.k);  // [N, k]
  if (router.norm_topk_prob) w = ops::div(w, ops::add(ops::sum_last(w), Tensor::scalar(1e-20f)));
  return ops::scale(w, float(router.routed_scaling_factor));
}

Tensor MoeBlock::forward(const Tensor& x, const ForwardContext& ctx) const {
  const int64_t H = x.dim(-1), N = x.numel() / H;
  Tensor flat = ops::reshape(x, {N, H});
  Tensor logits = linear(flat, gate.weight, Tensor(), kF32Compute);  // [N, E]
  Tensor scores = ops::sigmoid(logits);
  const MoeRoute route =
      select_experts(scores.data(), N, gate.e_score_correction_bias.value.data(), router);
  Tensor weights = routing_weights(scores, route);
  if (ctx.router_traces)
    ctx.router_traces->push_back(
        {ctx.layer_index, logits.detach(), route.experts, weights.detach()});

  size_t most = 0;  // tokens of the busiest routed expert
  for (const std::vector<int64_t>& slots : route.slots) most = std::max(most, slots.size());
  if (decodes_batched(ctx, int64_t(most)))
    return ops::reshape(decode_forward(flat, route, weights, ctx), x.shape());

  Tensor slot_weights = ops::reshape(weights, {N * route.k, 1});
  std::vector<Tensor> parts;
  std::vector<std::vector<int64_t>> rows;
  for (size_t e = 0; e < experts.size(); ++e) {
    const std::vector<int64_t>& slots = route.slots[e];
    if (slots.empty()) continue;  // no product, and its adapters get no gradient this step
    std::vector<int64_t> tokens(slots.size());
    for (size_t i = 0; i < slots.size(); ++i) tokens[i] = slots[i] / route.k;
    // Each expert draws its own dropout masks, and its tokens' resident adapters.
    ForwardContext expert_ctx_storage;
    const ForwardContext* expert_ctx = &ctx;
    AdapterRows sub_rows;
    if (ctx.training || ctx.adapter_rows) {
      expert_ctx_storage = ctx;
      expert_ctx_storage.dropout_seed = ctx.seed_for(ctx.layer_index, 1000 + int64_t(e));
      if (ctx.adapter_rows) {
        sub_rows = rows_of(*ctx.adapter_rows, tokens);
        expert_ctx_storage.adapter_rows = &sub_rows;
      }
      expert_ctx = &expert_ctx_storage;
    }
    parts.push_back(experts[e].forward_rows(flat, tokens, ops::gather_rows(slot_weights, slots),
                                            *expert_ctx));  // [n_e, H]
    rows.push_back(std::move(tokens));
  }
  Tensor routed = ops::reshape(ops::scatter_add_rows(parts, rows, N), x.shape());
  return ops::add(routed, shared_experts.forward(x, ctx));
}

void MoeBlock::visit(const std::string& prefix, const ParamVisitor& fn) {
  fn(prefix + ".gate.weight", gate.weight);
  fn(prefix + ".gate.e_score_correction_bias", gate.e_score_correction_bias);
  shared_experts.visit(prefix + ".shared_experts", fn);
  for (size_t e = 0; e < experts.size(); ++e)
    experts[e].visit(prefix + ".experts." + std::to_string(e), fn);
}

void MoeBlock::visit_linears(const std::string& prefix, int64_t layer, const LinearVisitor& fn) {
  shared_experts.visit_linears(prefix + ".shared_experts", layer, fn);
  for (size_t e = 0; e < experts.size(); ++e)
    experts[e].visit_linears(prefix + ".experts." + std::to_string(e), layer, fn);
}

}  // namespace glm4
