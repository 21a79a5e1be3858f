// Cross-entropy over rows of logits with ignore index -100.
#include <cmath>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "base/check.h"
#include "base/parallel.h"

namespace glm4::ops {

namespace {}

Tensor cross_entropy(const Tensor& logits, std::span<const int32_t> labels, double divide_by) {
  GLM4_CHECK(logits.rank() == 2 && logits.dim(0) == int64_t(labels.size()),
             "[cross_entropy] logits ", shape_str(logits.shape()), " and ", labels.size(),
             " labels");
  int64_t n = logits.dim(0), v = logits.dim(1);
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    int32_t l = labels[i];
    GLM4_CHECK(l == kIgnoreLabel || (l >= 0 && l < v), "[cross_entropy] label ", l, " at row ", i,
               " is outside [0, ", v, ") and not -100");
    count += l != kIgnoreLabel;
  }
  double divisor = divide_by > 0 ? divide_by : double(count);
  Tensor lse = Tensor::empty({n});
  std::vector<double> row_loss(size_t(n), 0.0);
  const float* pl = logits.data();
  float* plse = lse.data();
  parallel_for(n, 4, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float* row = pl + i * v;
      float m = -INFINITY;
      for (int64_t j = 0; j < v; ++j) m = std::max(m, row[j]);
      double s = 0;
      for (int64_t j = 0; j < v; ++j) s += std::exp(double(row[j] - m));
      plse[i] = float(m + std::log(s));
      if (labels[i] != kIgnoreLabel) row_loss[i] = double(m) + std::log(s) - double(row[labels[i]]);
    }
  });
  double total = 0;
  for (double l : row_loss) total += l;
  Tensor loss = Tensor::scalar(count == 0 ? 0.0f : float(total / divisor));
  std::vector<int32_t> kept(labels.begin(), labels.end());
  return record(loss, "cross_entropy", {logits}, {logits.detach(), lse},
                [kept = std::move(kept), n, v, divisor](Node& node, const Tensor& g) {
                  const float* pl = node.saved[0].data();
                  const float* plse = node.saved[1].data();
                  float coef = float(double(g.item()) / divisor);
                  Tensor d = Tensor::empty({n, v});
                  float* pd = d.data();
                  parallel_for(n, 4, [&](int64_t lo, int64_t hi) {
                    for (int64_t i = lo; i < hi; ++i) {
                      float* out = pd + i * v;
                      if (kept[i] == kIgnoreLabel) {
                        std::fill_n(out, v, 0.0f);
                        continue;
                      }
                      const float* row = pl + i * v;
                      for (int64_t j = 0; j < v; ++j) out[j] = coef * std::exp(row[j] - plse[i]);
                      out[kept[i]] -= coef;
                    }
                  });
                  return std::vector<Tensor>{d};
                });
}

}  // namespace glm4::ops
