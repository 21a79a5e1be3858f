#include "model/param.h"

#include "autograd/ops.h"
#include "base/check.h"

namespace glm4 {

void Param::assign(Weight stored) {
  GLM4_CHECK(stored.numel() == shape_numel(shape), "[param] ", stored.rows(), " x ", stored.cols(),
             " values for a parameter of shape ", shape_str(shape));
  if (is_matrix()) {
    frozen = std::move(stored);
    value = Tensor();
  } else {
    value = Tensor::empty(shape);
    stored.to_f32(value.data());
    frozen = Weight();
  }
}

Tensor Param::to_f32() const {
  if (value.defined()) return value.detach();
  GLM4_CHECK(!frozen.empty(), "[param] parameter of shape ", shape_str(shape), " is not loaded");
  Tensor t = Tensor::empty(shape);
  frozen.to_f32(t.data());
  return t;
}

void Param::make_trainable() {
  if (!value.defined()) value = to_f32();
  frozen = Weight();
  value.set_requires_grad(true);
}

Tensor linear(const Tensor& x, const Param& w, const Tensor& bias, const ComputeChoice& compute,
              bool values) {
  return w.value.defined() ? ops::linear(x, w.value, bias)
                           : ops::linear(x, w.frozen, bias, compute, values);
}

Tensor embedding(std::span<const int32_t> ids, const Param& table) {
  return table.value.defined() ? ops::embedding(ids, table.value)
                               : ops::embedding(ids, table.frozen);
}

}  // namespace glm4
