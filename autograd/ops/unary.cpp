// Elementwise exp, log, rsqrt, sigmoid.
#include <cmath>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "base/parallel.h"

namespace glm4::ops {

namespace {
template <typename F>
Tensor map(const Tensor& x, F f) {
  Tensor y = Tensor::empty(x.shape());
  const float* px = x.data();
  float* py = y.data();
  parallel_for(x.numel(), 1 << 13, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) py[i] = f(px[i]);
  });
  return y;
}

// grad_in[i] = g[i] * f(saved[i])
template <typename F>
Tensor map_grad(const Tensor& g, const Tensor& saved, F f) {
  Tensor d = Tensor::empty(g.shape());
  const float* pg = g.data();
  const float* ps = saved.data();
  float* pd = d.data();
  parallel_for(g.numel(), 1 << 13, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) pd[i] = pg[i] * f(ps[i]);
  });
  return d;
}
}  // namespace

Tensor exp(const Tensor& x) {
  Tensor y = map(x, [](float v) { return std::exp(v); });
  return record(y, "exp", {x}, {y.detach()}, [](Node& n, const Tensor& g) {
    return std::vector<Tensor>{map_grad(g, n.saved[0], [](float y) { return y; })};
  });
}

Tensor log(const Tensor& x) {
  Tensor y = map(x, [](float v) { return std::log(v); });
  return record(y, "log", {x}, {x.detach()}, [](Node& n, const Tensor& g) {
    return std::vector<Tensor>{map_grad(g, n.saved[0], [](float x) { return 1.0f / x; })};
  });
}

Tensor rsqrt(const Tensor& x) {
  Tensor y = map(x, [](float v) { return 1.0f / std::sqrt(v); });
  return record(y, "rsqrt", {x}, {y.detach()}, [](Node& n, const Tensor& g) {
    return std::vector<Tensor>{map_grad(g, n.saved[0], [](float y) { return -0.5f * y * y * y; })};
  });
}

Tensor sigmoid(const Tensor& x) {
  Tensor y = map(x, [](float v) { return 1.0f / (1.0f + std::exp(-v)); });
  return record(y, "sigmoid", {x}, {y.detach()}, [](Node& n, const Tensor& g) {
    return std::vector<Tensor>{map_grad(g, n.saved[0], [](float y) { return y * (1.0f - y); })};
  });
}

}  // namespace glm4::ops
