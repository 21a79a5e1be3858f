#include "model/swiglu_mlp.h"

#include "autograd/ops.h"
#include "model/forward_context.h"

namespace glm4 {

namespace {
Tensor down(const Linear& down_proj, const Tensor& h, const ForwardContext& ctx) {
  return ctx.mlp_output_unread ? down_proj.forward_unread(h, ctx) : down_proj.forward(h, ctx);
}
}  // namespace

Tensor SwigluMlp::forward(const Tensor& x, const ForwardContext& ctx) const {
  return down(down_proj, ops::swiglu(gate_proj.forward(x, ctx), up_proj.forward(x, ctx)), ctx);
}

Tensor SwigluMlp::forward_rows(const Tensor& source, std::span<const int64_t> rows,
                               const Tensor& scale, const ForwardContext& ctx) const {
  const Tensor x = ops::gather_rows(source, rows);
  const GatheredRows from{source, rows};
  return down(down_proj,
              ops::swiglu(gate_proj.forward(x, from, ctx), up_proj.forward(x, from, ctx), scale),
              ctx);
}

void SwigluMlp::visit(const std::string& prefix, const ParamVisitor& fn) {
  gate_proj.visit(prefix + ".gate_proj", fn);
  up_proj.visit(prefix + ".up_proj", fn);
  down_proj.visit(prefix + ".down_proj", fn);
}

void SwigluMlp::visit_linears(const std::string& prefix, int64_t layer, const LinearVisitor& fn) {
  fn({prefix + ".gate_proj", layer, "gate_proj"}, gate_proj);
  fn({prefix + ".up_proj", layer, "up_proj"}, up_proj);
  fn({prefix + ".down_proj", layer, "down_proj"}, down_proj);
}

}  // namespace glm4
