#include "tests/support/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "autograd/node.h"
#include "autograd/ops.h"

namespace glm4::testing {

Tensor random_tensor(const Shape& shape, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = u(rng);
  return t;
}

namespace {
double weighted_sum(const Tensor& out, const Tensor& r) {
  double s = 0;
  for (int64_t i = 0; i < out.numel(); ++i) s += double(out.data()[i]) * r.data()[i];
  return s;
}
}  // namespace

std::string check_gradients(const GradCase& c, uint64_t seed) {
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    Tensor t = random_tensor(c.shapes[i], seed * 1000 + i, c.lo, c.hi);
    bool diff = std::find(c.skip.begin(), c.skip.end(), int(i)) == c.skip.end();
    t.set_requires_grad(diff);
    inputs.push_back(t);
  }
  Tensor out = c.fn(inputs);
  Tensor r = random_tensor(out.shape(), seed * 7 + 3);
  backward(ops::sum(ops::mul(out, r)));

  std::ostringstream report;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    Tensor analytic = inputs[i].grad();
    if (!analytic.defined()) {
      report << c.name << ": input " << i << " " << shape_str(inputs[i].shape())
             << " got no gradient\n";
      continue;
    }
    std::vector<double> numeric(size_t(inputs[i].numel()));
    {
      NoGradGuard no_grad;
      float* p = inputs[i].data();
      for (int64_t j = 0; j < inputs[i].numel(); ++j) {
        float keep = p[j];
        p[j] = keep + c.eps;
        double up = weighted_sum(c.fn(inputs), r);
        p[j] = keep - c.eps;
        double down = weighted_sum(c.fn(inputs), r);
        p[j] = keep;
        numeric[j] = (up - down) / (2.0 * double(c.eps));
      }
    }
    double scale = 1e-2, worst = 0;
    int64_t worst_at = -1;
    for (double v : numeric) scale = std::max(scale, std::abs(v));
    for (int64_t j = 0; j < inputs[i].numel(); ++j) {
      double err = std::abs(double(analytic.data()[j]) - numeric[j]) / scale;
      if (err > worst) {
        worst = err;
        worst_at = j;
      }
    }
    if (worst > c.tolerance)
      report << c.name << ": input " << i << " " << shape_str(inputs[i].shape())
             << " worst element " << worst_at << ": analytic " << analytic.data()[worst_at]
             << " numeric " << numeric[worst_at] << " (relative error " << worst << " > "
             << c.tolerance << ")\n";
  }
  return report.str();
}

}  // namespace glm4::testing
