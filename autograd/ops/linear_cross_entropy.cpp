// Fused lm_head projection and cross-entropy, chunked over rows.
#include <cmath>

#include "autograd/kernels/gemm.h"
#include "autograd/kernels/vec_math.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/tensor_math.h"
#include "autograd/weight.h"
#include "base/check.h"
#include "base/parallel.h"

namespace glm4::ops {

namespace {
// Rows of logits a chunk holds. The chunk is live at the end of the forward, beside every saved
// activation: at 128 rows a 151k vocabulary takes 78 MB and 32k 16 MB. Fewer rows read the lm_head
// more often (twice a chunk): 64 made the mid MoE step 8% slower, 128 cost nothing measurable.
constexpr int64_t kChunkRows = 128;
}  // namespace

Tensor linear_cross_entropy(const Tensor& hidden, const Weight& frozen_w, const Tensor& trainable_w,
                            std::span<const int32_t> labels, double divide_by,
                            const ComputeChoice& compute) {
  bool trainable = trainable_w.defined();
  Weight w = trainable ? Weight::view(DType::F32, trainable_w.data(), trainable_w.dim(0),
                                      trainable_w.dim(1), trainable_w.impl_ptr())
                       : frozen_w;
  GLM4_CHECK(
      hidden.rank() == 2 && hidden.dim(1) == w.cols() && hidden.dim(0) == int64_t(labels.size()),
      "[linear_cross_entropy] hidden ", shape_str(hidden.shape()), ", weight (", w.rows(), ",",
      w.cols(), "), ", labels.size(), " labels");
  const int64_t n = hidden.dim(0), h = hidden.dim(1), v = w.rows();
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    int32_t l = labels[i];
    GLM4_CHECK(l == kIgnoreLabel || (l >= 0 && l < v), "[linear_cross_entropy] label ", l,
               " at row ", i, " is outside [0, ", v, ") and not -100");
    count += l != kIgnoreLabel;
  }
  const double divisor = divide_by > 0 ? divide_by : double(count);
  const bool need_grad = GradMode::enabled() && (hidden.requires_grad() || trainable);
  Tensor d_hidden = need_grad && hidden.requires_grad() ? Tensor::zeros({n, h}) : Tensor();
  Tensor d_weight = need_grad && trainable ? Tensor::zeros({v, h}) : Tensor();
  Tensor logits = Tensor::empty({std::min(n, kChunkRows), v});
  double total = 0;
  std::vector<double> row_loss(static_cast<size_t>(kChunkRows));
  for (int64_t r0 = 0; r0 < n; r0 += kChunkRows) {
    const int64_t rows = std::min(kChunkRows, n - r0);
    bool any = false;
    for (int64_t i = r0; i < r0 + rows; ++i) any |= labels[i] != kIgnoreLabel;
    if (!any) continue;  // ignored rows add nothing to the loss or the gradients
    float* pl = logits.data();
    linear_forward(hidden.data() + r0 * h, rows, h, w, pl, false, compute);
    parallel_for(rows, 4, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        float* row = pl + i * v;
        int32_t label = labels[r0 + i];
        if (label == kIgnoreLabel) {
          row_loss[i] = 0;
          if (need_grad) std::fill_n(row, v, 0.0f);
          continue;
        }
        const float m = kernels::max_of(row, v), label_logit = row[label];
        const double s = kernels::exp_shifted(row, m, row, v);  // row := exp(logits - max)
        row_loss[i] = double(m) + std::log(s) - double(label_logit);
        if (need_grad) {  // d loss / d logits for an upstream gradient of 1: softmax - onehot
          kernels::scale_in_place(row, v, float(1.0 / (divisor * s)));
          row[label] -= float(1.0 / divisor);
        }
      }
    });
    for (int64_t i = 0; i < rows; ++i) total += row_loss[i];
    if (d_hidden.defined())
      linear_input_grad(pl, rows, v, w, d_hidden.data() + r0 * h, false, compute);
    if (d_weight.defined())
      linear_weight_grad(pl, hidden.data() + r0 * h, rows, v, h, d_weight.data(), true);
  }
  Tensor loss = Tensor::scalar(count == 0 ? 0.0f : float(total / divisor));
  if (!need_grad) return loss;
  return record(loss, "linear_cross_entropy", {hidden, trainable_w}, {d_hidden, d_weight},
                [](Node& node, const Tensor& g) {
                  float s = g.item();
                  std::vector<Tensor> grads(2);
                  for (int i = 0; i < 2; ++i) {
                    if (!node.needs_grad(size_t(i)) || !node.saved[i].defined()) continue;
                    grads[i] = node.saved[i].clone();
                    if (s != 1.0f) scale_into(grads[i], s);
                  }
                  return grads;
                });
}

}  // namespace glm4::ops
