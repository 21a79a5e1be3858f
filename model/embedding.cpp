#include "model/embedding.h"

namespace glm4 {

Tensor Embedding::forward(std::span<const int32_t> ids) const { return embedding(ids, weight); }

}  // namespace glm4
