#include "model/embedding.h"

#include "autograd/ops.h"

namespace glm4 {

Tensor Embedding::forward(std::span<const int32_t> ids) const {
  return weight.value.defined() ? ops::embedding(ids, weight.value) : ops::embedding(ids, weight.frozen);
}

}  // namespace glm4
