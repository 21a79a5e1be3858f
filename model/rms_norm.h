// RMSNorm module: weight [hidden], eps from the config.
#pragma once
#include "model/param.h"

namespace glm4 {

class RmsNorm {
 public:
  RmsNorm(int64_t hidden, double eps) : eps(float(eps)) { weight.shape = {hidden}; }
  Tensor forward(const Tensor& x) const;
  void visit(const std::string& prefix, const ParamVisitor& fn) { fn(prefix + ".weight", weight); }

  float eps;
  Param weight;
};

}  // namespace glm4
