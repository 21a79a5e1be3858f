// One decoder layer. GLM-4-0414 has four norms (post_attention_layernorm is the pre-MLP norm):
//   h = x + post_self_attn_layernorm(attn(input_layernorm(x)))
//   y = h + post_mlp_layernorm(mlp(post_attention_layernorm(h)))
// GLM, ChatGLM and glm4_moe layers are the same without the two post norms. The MLP is GLM's
// fused gate_up_proj one, or for glm4_moe a SwiGLU (the first first_k_dense_replace layers) or
// a Mixture-of-Experts block (the others). glm4_moe_lite layers are glm4_moe's with latent
// attention.
#pragma once
#include <optional>
#include <variant>

#include "model/glm4_attention.h"
#include "model/glm4_mlp.h"
#include "model/mla_attention.h"
#include "model/moe_block.h"
#include "model/rms_norm.h"
#include "model/swiglu_mlp.h"

namespace glm4 {

using DecoderMlp = std::variant<Glm4Mlp, SwigluMlp, MoeBlock>;
using DecoderAttention = std::variant<Glm4Attention, MlaAttention>;

class Glm4DecoderLayer {
 public:
  Glm4DecoderLayer(const ModelConfig& c, int64_t layer);
  // [B, T, hidden]; with `rows` (B = 1) every row attends to its own KV cache.
  Tensor forward(const Tensor& x, const ForwardContext& ctx, CachedRows* rows = nullptr) const;
  void visit(const std::string& prefix, const ParamVisitor& fn);
  void visit_linears(const std::string& prefix, int64_t layer, const LinearVisitor& fn);

  RmsNorm input_layernorm;
  DecoderAttention self_attn;
  std::optional<RmsNorm> post_self_attn_layernorm;
  RmsNorm post_attention_layernorm;
  DecoderMlp mlp;
  std::optional<RmsNorm> post_mlp_layernorm;
};

}  // namespace glm4
