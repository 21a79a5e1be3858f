// glm4_moe's Mixture-of-Experts MLP (transformers' Glm4MoeMoE): a router (`gate`), n routed
// SwiGLU `experts` and the `shared_experts` SwiGLU every token goes through. Tokens are grouped
// by expert: one product per expert that some token chose, over exactly those tokens.
#pragma once
#include <vector>

#include "model/config.h"
#include "model/moe_router.h"
#include "model/param.h"
#include "model/swiglu_mlp.h"

namespace glm4 {

struct AdapterRows;
struct ForwardContext;

// The router's tensors (transformers' Glm4MoeTopkRouter): not a Linear, so no LoRA.
struct MoeGate {
  Param weight;                   // [experts, hidden]; its logits are always taken in fp32
  Param e_score_correction_bias;  // [experts], fp32 in the files too; steers the choice only
};

class MoeBlock {
 public:
  explicit MoeBlock(const ModelConfig& c);
  // x [..., hidden] -> sum over the chosen experts of weight * expert(x) + shared_experts(x).
  Tensor forward(const Tensor& x, const ForwardContext& ctx) const;
  // Tokens a routed expert may get at most for a forward without gradients to run decode_forward
  // (decode steps, and short prompts spread over many experts; the shared expert takes them all).
  static constexpr int64_t kDecodeBatchTokens = 16;
  // Whether forward takes decode_forward: no gradient and no training, no routed expert given more
  // than kDecodeBatchTokens tokens (`expert_tokens`: the most one gets), every expert a frozen
  // weight without bias whose adapters, live or resident, are plain LoRA (not DoRA).
  bool decodes_batched(const ForwardContext& ctx, int64_t expert_tokens) const;
  void visit(const std::string& prefix, const ParamVisitor& fn);
  void visit_linears(const std::string& prefix, int64_t layer, const LinearVisitor& fn);

  RouterSettings router;
  MoeGate gate;
  std::vector<SwigluMlp> experts;
  SwigluMlp shared_experts;

 private:
  // The experts of flat [N, hidden] as forward's graph path computes them, to the bit, in two
  // parallel loops (four with adapters: moe_decode.cpp).
  Tensor decode_forward(const Tensor& flat, const MoeRoute& route, const Tensor& weights,
                        const ForwardContext& ctx) const;
  // The resident-adapter rows of a forward restricted to `tokens` (ascending), renumbered: what
  // an expert given those tokens applies.
  static AdapterRows rows_of(const AdapterRows& all, const std::vector<int64_t>& tokens);
  // The routing weights [N, k]: the chosen experts' sigmoid scores (with their gradient),
  // normalised when norm_topk_prob, times routed_scaling_factor.
  Tensor routing_weights(const Tensor& scores, const MoeRoute& route) const;
};

}  // namespace glm4
