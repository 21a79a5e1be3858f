// sum and mean over all elements.
#include <algorithm>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "base/check.h"

namespace glm4::ops {

Tensor sum(const Tensor& x) {
  double s = 0;
  const float* p = x.data();
  for (int64_t i = 0; i < x.numel(); ++i) s += p[i];
  Shape shape = x.shape();
  return record(Tensor::scalar(float(s)), "sum", {x}, {}, [shape](Node&, const Tensor& g) {
    return std::vector<Tensor>{Tensor::full(shape, g.item())};
  });
}

Tensor mean(const Tensor& x) {
  int64_t n = x.numel();
  GLM4_CHECK(n > 0, "[mean] of an empty tensor ", shape_str(x.shape()));
  return scale(sum(x), float(1.0 / double(n)));
}

}  // namespace glm4::ops

namespace glm4::ops {

Tensor sum_last(const Tensor& x) {
  GLM4_CHECK(x.rank() >= 1, "[sum_last] needs at least one dimension, got ", shape_str(x.shape()));
  int64_t n = x.dim(-1), rows = x.numel() / std::max<int64_t>(n, 1);
  Shape out_shape = x.shape();
  out_shape.back() = 1;
  Tensor y = Tensor::empty(out_shape);
  const float* px = x.data();
  float* py = y.data();
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t j = 0; j < n; ++j) s += px[r * n + j];
    py[r] = float(s);
  }
  Shape in_shape = x.shape();
  return record(y, "sum_last", {x}, {}, [in_shape](Node&, const Tensor& g) {
    int64_t n = in_shape.back();
    Tensor d = Tensor::empty(in_shape);
    const float* pg = g.data();
    float* pd = d.data();
    for (int64_t r = 0; r < g.numel(); ++r) std::fill_n(pd + r * n, n, pg[r]);
    return std::vector<Tensor>{d};
  });
}

}  // namespace glm4::ops
