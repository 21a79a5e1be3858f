// One decoder layer. GLM-4-0414 has four norms (post_attention_layernorm is the pre-MLP norm):
//   h = x + post_self_attn_layernorm(attn(input_layernorm(x)))
//   y = h + post_mlp_layernorm(mlp(post_attention_layernorm(h)))
// GLM and ChatGLM layers are the same without the two post norms.
#pragma once
#include <optional>

#include "model/glm4_attention.h"
#include "model/glm4_mlp.h"
#include "model/rms_norm.h"

namespace glm4 {

class Glm4DecoderLayer {
 public:
  explicit Glm4DecoderLayer(const ModelConfig& c);
  // [B, T, hidden]; with `rows` (B = 1) every row attends to its own KV cache.
  Tensor forward(const Tensor& x, const ForwardContext& ctx, CachedRows* rows = nullptr) const;
  void visit(const std::string& prefix, const ParamVisitor& fn);
  void visit_linears(const std::string& prefix, int64_t layer, const LinearVisitor& fn);

  RmsNorm input_layernorm;
  Glm4Attention self_attn;
  std::optional<RmsNorm> post_self_attn_layernorm;
  RmsNorm post_attention_layernorm;
  Glm4Mlp mlp;
  std::optional<RmsNorm> post_mlp_layernorm;
};

}  // namespace glm4
