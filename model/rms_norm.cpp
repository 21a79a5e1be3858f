#include "model/rms_norm.h"

#include "autograd/ops.h"

namespace glm4 {

Tensor RmsNorm::forward(const Tensor& x) const { return ops::rms_norm(x, weight.value, eps); }

}  // namespace glm4
