#include "model/param.h"

#include <cstring>

#include "base/check.h"

namespace glm4 {

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

}  // namespace glm4
