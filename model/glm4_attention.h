// GLM attention: q/k/v projections (bias per config), partial interleaved RoPE, GQA, o_proj.
#pragma once
#include "model/config.h"
#include "model/linear.h"

namespace glm4 {

struct ForwardContext;

class Glm4Attention {
 public:
  explicit Glm4Attention(const ModelConfig& c);
  Tensor forward(const Tensor& x, const ForwardContext& ctx) const;  // [B, T, hidden]
  void visit(const std::string& prefix, const ParamVisitor& fn);
  void visit_linears(const std::string& prefix, int64_t layer, const LinearVisitor& fn);

  int64_t heads, kv_heads, head_dim, rotary_dim;
  double rope_theta;
  Linear q_proj, k_proj, v_proj, o_proj;
};

}  // namespace glm4
