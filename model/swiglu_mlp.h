// SwiGLU MLP with separate projections, down_proj(silu(gate_proj(x)) * up_proj(x)): glm4_moe's
// dense layers, its shared experts and each routed expert (transformers' Glm4MoeMLP).
#pragma once
#include "model/linear.h"

namespace glm4 {

struct ForwardContext;

class SwigluMlp {
 public:
  // seed_slot, + 1, + 2: the dropout slots of gate_proj, up_proj, down_proj.
  SwigluMlp(int64_t hidden, int64_t intermediate, int seed_slot)
      : gate_proj(hidden, intermediate, false, seed_slot),
        up_proj(hidden, intermediate, false, seed_slot + 1),
        down_proj(intermediate, hidden, false, seed_slot + 2) {}
  Tensor forward(const Tensor& x, const ForwardContext& ctx) const;  // [..., hidden]
  // silu(gate_proj(x)) * up_proj(x): down_proj's input, [..., intermediate].
  Tensor hidden(const Tensor& x, const ForwardContext& ctx) const;
  void visit(const std::string& prefix, const ParamVisitor& fn);
  void visit_linears(const std::string& prefix, int64_t layer, const LinearVisitor& fn);

  Linear gate_proj;  // [intermediate, hidden]
  Linear up_proj;    // [intermediate, hidden]
  Linear down_proj;  // [hidden, intermediate]
};

}  // namespace glm4
