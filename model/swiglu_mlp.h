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
  // A routed expert: down_proj(scale * silu(gate_proj(x)) * up_proj(x)) for x = source[rows]
  // (rows increasing) and its routing weights scale [rows, 1]. Scaling the hidden state rather
  // than the output (the same up to rounding) keeps no output for the weights' gradient, and
  // the adapters' first products keep source, not x (Linear's GatheredRows form).
  Tensor forward_rows(const Tensor& source, std::span<const int64_t> rows, const Tensor& scale,
                      const ForwardContext& ctx) const;
  void visit(const std::string& prefix, const ParamVisitor& fn);
  void visit_linears(const std::string& prefix, int64_t layer, const LinearVisitor& fn);

  Linear gate_proj;  // [intermediate, hidden]
  Linear up_proj;    // [intermediate, hidden]
  Linear down_proj;  // [hidden, intermediate]
};

}  // namespace glm4
