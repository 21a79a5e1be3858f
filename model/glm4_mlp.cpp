#include "model/glm4_mlp.h"

#include "autograd/ops.h"

namespace glm4 {

Tensor Glm4Mlp::forward(const Tensor& x, const ForwardContext& ctx) const {
  return down_proj.forward(ops::swiglu(gate_up_proj.forward(x, ctx)), ctx);
}

}  // namespace glm4
