// add, sub, mul, div, scale with broadcasting; sum_to; dropout.
#include <random>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/ops/broadcast.h"
#include "base/check.h"
#include "base/parallel.h"

namespace glm4::ops {

namespace detail {
Broadcast broadcast(const char* op, const Shape& a, const Shape& b) {
  Broadcast bc;
  size_t r = std::max(a.size(), b.size());
  GLM4_CHECK(r <= 4, "[", op, "] rank > 4: ", shape_str(a), " and ", shape_str(b));
  bc.out.assign(r, 1);
  std::array<int64_t, 4> da{1, 1, 1, 1}, db{1, 1, 1, 1};
  for (size_t i = 0; i < a.size(); ++i) da[4 - a.size() + i] = a[i];
  for (size_t i = 0; i < b.size(); ++i) db[4 - b.size() + i] = b[i];
  int64_t sa = 1, sb = 1;
  for (int i = 3; i >= 0; --i) {
    GLM4_CHECK(da[i] == db[i] || da[i] == 1 || db[i] == 1, "[", op, "] shapes ", shape_str(a),
               " and ", shape_str(b), " do not broadcast");
    bc.dims[i] = std::max(da[i], db[i]);
    bc.stride_a[i] = da[i] == 1 ? 0 : sa;
    bc.stride_b[i] = db[i] == 1 ? 0 : sb;
    sa *= da[i];
    sb *= db[i];
  }
  for (size_t i = 0; i < r; ++i) bc.out[i] = bc.dims[4 - r + i];
  return bc;
}
}  // namespace detail

namespace {
constexpr int64_t kGrain = 1 << 14;

template <typename F>
Tensor binary_values(const char* op, const Tensor& a, const Tensor& b, F f) {
  if (a.shape() == b.shape()) {
    Tensor out = Tensor::empty(a.shape());
    const float* pa = a.data();
    const float* pb = b.data();
    float* po = out.data();
    parallel_for(out.numel(), kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) po[i] = f(pa[i], pb[i]);
    });
    return out;
  }
  detail::Broadcast bc = detail::broadcast(op, a.shape(), b.shape());
  Tensor out = Tensor::empty(bc.out);
  const float* pa = a.data();
  const float* pb = b.data();
  float* po = out.data();
  detail::for_each_broadcast(bc,
                             [&](int64_t o, int64_t ia, int64_t ib) { po[o] = f(pa[ia], pb[ib]); });
  return out;
}
}  // namespace

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  detail::Broadcast bc = detail::broadcast("sum_to", g.shape(), shape);
  GLM4_CHECK(bc.out == g.shape(), "[sum_to] cannot reduce ", shape_str(g.shape()), " to ",
             shape_str(shape));
  Tensor out = Tensor::zeros(shape);
  const float* pg = g.data();
  float* po = out.data();
  detail::for_each_broadcast(bc, [&](int64_t o, int64_t, int64_t ib) { po[ib] += pg[o]; });
  return out;
}

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_values("add", a, b, [](float x, float y) { return x + y; });
  Shape sa = a.shape(), sb = b.shape();
  return record(out, "add", {a, b}, {}, [sa, sb](Node& n, const Tensor& g) {
    return std::vector<Tensor>{n.needs_grad(0) ? sum_to(g, sa) : Tensor(),
                               n.needs_grad(1) ? sum_to(g, sb) : Tensor()};
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_values("sub", a, b, [](float x, float y) { return x - y; });
  Shape sa = a.shape(), sb = b.shape();
  return record(out, "sub", {a, b}, {}, [sa, sb](Node& n, const Tensor& g) {
    return std::vector<Tensor>{n.needs_grad(0) ? sum_to(g, sa) : Tensor(),
                               n.needs_grad(1) ? sum_to(scale(g, -1.0f), sb) : Tensor()};
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_values("mul", a, b, [](float x, float y) { return x * y; });
  return record(out, "mul", {a, b}, {a.detach(), b.detach()}, [](Node& n, const Tensor& g) {
    const Tensor& a = n.saved[0];
    const Tensor& b = n.saved[1];
    auto times = [](float x, float y) { return x * y; };
    return std::vector<Tensor>{
        n.needs_grad(0) ? sum_to(binary_values("mul", g, b, times), a.shape()) : Tensor(),
        n.needs_grad(1) ? sum_to(binary_values("mul", g, a, times), b.shape()) : Tensor()};
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_values("div", a, b, [](float x, float y) { return x / y; });
  Shape sa = a.shape();
  return record(out, "div", {a, b}, {b.detach(), out.detach()}, [sa](Node& n, const Tensor& g) {
    const Tensor& b = n.saved[0];
    const Tensor& y = n.saved[1];
    Tensor da, db;
    if (n.needs_grad(0))  // g / b
      da = sum_to(binary_values("div", g, b, [](float x, float v) { return x / v; }), sa);
    if (n.needs_grad(1)) {  // -g * y / b
      Tensor gy = binary_values("div", g, y, [](float x, float v) { return x * v; });
      db = sum_to(binary_values("div", gy, b, [](float x, float v) { return -x / v; }), b.shape());
    }
    return std::vector<Tensor>{da, db};
  });
}

Tensor scale(const Tensor& a, float s) {
  Tensor out = Tensor::empty(a.shape());
  const float* pa = a.data();
  float* po = out.data();
  parallel_for(out.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) po[i] = pa[i] * s;
  });
  return record(out, "scale", {a}, {},
                [s](Node&, const Tensor& g) { return std::vector<Tensor>{scale(g, s)}; });
}

Tensor dropout(const Tensor& x, float p, uint64_t seed) {
  GLM4_CHECK(p >= 0.0f && p < 1.0f, "[dropout] probability ", p, " is not in [0, 1)");
  if (p == 0.0f) return x;
  Tensor mask = Tensor::empty(x.shape());
  float keep_scale = 1.0f / (1.0f - p);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  float* pm = mask.data();
  for (int64_t i = 0; i < mask.numel(); ++i) pm[i] = uniform(rng) >= p ? keep_scale : 0.0f;
  Tensor out = binary_values("dropout", x, mask, [](float a, float m) { return a * m; });
  return record(out, "dropout", {x}, {mask}, [](Node& n, const Tensor& g) {
    return std::vector<Tensor>{
        binary_values("dropout", g, n.saved[0], [](float a, float m) { return a * m; })};
  });
}

}  // namespace glm4::ops
