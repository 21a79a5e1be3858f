// GLM MLP: down_proj(silu(gate) * up) with gate, up = split(gate_up_proj(x)), gate first.
#pragma once
#include "model/config.h"
#include "model/linear.h"

namespace glm4 {

class Glm4Mlp {
 public:
  explicit Glm4Mlp(const ModelConfig& c)
      : gate_up_proj(c.hidden_size, 2 * c.intermediate_size, false, 4),
        down_proj(c.intermediate_size, c.hidden_size, false, 5) {}
  Tensor forward(const Tensor& x, const ForwardContext& ctx) const;
  void visit(const std::string& prefix, const ParamVisitor& fn) {
    gate_up_proj.visit(prefix + ".gate_up_proj", fn);
    down_proj.visit(prefix + ".down_proj", fn);
  }
  void visit_linears(const std::string& prefix, int64_t layer, const LinearVisitor& fn) {
    fn({prefix + ".gate_up_proj", layer, "gate_up_proj"}, gate_up_proj);
    fn({prefix + ".down_proj", layer, "down_proj"}, down_proj);
  }

  Linear gate_up_proj;  // [2 * intermediate, hidden]
  Linear down_proj;     // [hidden, intermediate]
};

}  // namespace glm4
