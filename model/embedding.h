// Token embedding: weight [vocab, hidden], frozen in its stored dtype or trainable fp32.
#pragma once
#include <span>

#include "model/param.h"

namespace glm4 {

class Embedding {
 public:
  Embedding(int64_t vocab, int64_t hidden) { weight.shape = {vocab, hidden}; }
  Tensor forward(std::span<const int32_t> ids) const;  // [N] -> [N, hidden]
  void visit(const std::string& prefix, const ParamVisitor& fn) { fn(prefix + ".weight", weight); }

  Param weight;
};

}  // namespace glm4
