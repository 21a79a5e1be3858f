// Batched matmul and linear layers (trainable fp32 weights and frozen stored-dtype weights).
#include <algorithm>

#include "autograd/kernels/gemm.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/tensor_math.h"
#include "autograd/weight.h"
#include "base/check.h"
#include "base/parallel.h"

namespace glm4::ops {

namespace {
// Column sums of g viewed as [rows, n]: the bias gradient.
Tensor column_sums(const Tensor& g, int64_t n) {
  Tensor out = Tensor::zeros({n});
  int64_t rows = g.numel() / n;
  const float* pg = g.data();
  float* po = out.data();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) po[j] += pg[r * n + j];
  return out;
}

void add_bias(Tensor& y, const Tensor& bias) {
  int64_t n = bias.numel(), rows = y.numel() / n;
  float* py = y.data();
  const float* pb = bias.data();
  parallel_for(rows, 64, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r)
      for (int64_t j = 0; j < n; ++j) py[r * n + j] += pb[j];
  });
}

Weight weight_view(const Tensor& w) {
  return Weight::view(DType::F32, w.data(), w.dim(0), w.dim(1), w.impl_ptr());
}

void check_linear(const Tensor& x, int64_t n, int64_t k, const Tensor& bias) {
  GLM4_CHECK(x.rank() >= 1 && x.dim(-1) == k, "[linear] input ", shape_str(x.shape()),
             " does not match weight (", n, ",", k, ")");
  GLM4_CHECK(!bias.defined() || (bias.rank() == 1 && bias.dim(0) == n), "[linear] bias ",
             shape_str(bias.defined() ? bias.shape() : Shape{}), " does not match weight (", n, ",",
             k, ")");
}

Tensor linear_values(const Tensor& x, const Weight& w, const Tensor& bias,
                     const ComputeChoice& compute) {
  int64_t k = w.cols(), n = w.rows(), m = x.numel() / k;
  Shape out_shape = x.shape();
  out_shape.back() = n;
  Tensor y = Tensor::empty(out_shape);
  linear_forward(x.data(), m, k, w, y.data(), false, compute);
  if (bias.defined()) add_bias(y, bias);
  return y;
}
}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  GLM4_CHECK(a.rank() >= 2 && b.rank() >= 2 && a.dim(-1) == b.dim(-2), "[matmul] shapes ",
             shape_str(a.shape()), " and ", shape_str(b.shape()));
  int64_t m = a.dim(-2), k = a.dim(-1), n = b.dim(-1);
  int64_t batch = a.numel() / std::max<int64_t>(m * k, 1);
  bool shared_b = b.rank() == 2;
  GLM4_CHECK(
      shared_b || (b.rank() == a.rank() && b.numel() / std::max<int64_t>(k * n, 1) == batch &&
                   std::equal(a.shape().begin(), a.shape().end() - 2, b.shape().begin())),
      "[matmul] batch dims of ", shape_str(a.shape()), " and ", shape_str(b.shape()));
  Shape out_shape = a.shape();
  out_shape.back() = n;
  Tensor c = Tensor::empty(out_shape);
  for (int64_t i = 0; i < batch; ++i)
    sgemm(false, false, m, n, k, 1.0f, a.data() + i * m * k, k,
          b.data() + (shared_b ? 0 : i * k * n), n, 0.0f, c.data() + i * m * n, n);
  return record(
      c, "matmul", {a, b}, {a.detach(), b.detach()},
      [m, n, k, batch, shared_b](Node& node, const Tensor& g) {
        const Tensor& a = node.saved[0];
        const Tensor& b = node.saved[1];
        Tensor da, db;
        if (node.needs_grad(0)) {
          da = Tensor::empty(a.shape());
          for (int64_t i = 0; i < batch; ++i)  // da = g b^T
            sgemm(false, true, m, k, n, 1.0f, g.data() + i * m * n, n,
                  b.data() + (shared_b ? 0 : i * k * n), n, 0.0f, da.data() + i * m * k, k);
        }
        if (node.needs_grad(1)) {
          db = Tensor::zeros(b.shape());
          for (int64_t i = 0; i < batch; ++i)  // db (+)= a^T g
            sgemm(true, false, k, n, m, 1.0f, a.data() + i * m * k, k, g.data() + i * m * n, n,
                  shared_b ? 1.0f : 0.0f, db.data() + (shared_b ? 0 : i * k * n), n);
        }
        return std::vector<Tensor>{da, db};
      });
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  GLM4_CHECK(w.rank() == 2, "[linear] weight must be 2-D, got ", shape_str(w.shape()));
  int64_t n = w.dim(0), k = w.dim(1);
  check_linear(x, n, k, bias);
  Tensor y = linear_values(x, weight_view(w), bias, kF32Compute);  // fp32 weights: fp32 products
  return record(y, "linear", {x, w, bias}, {x.detach(), w.detach()}, {0},
                [n, k](Node& node, const Tensor& g) {
                  const Tensor& x = node.saved[0];
                  const Tensor& w = node.saved[1];
                  int64_t m = x.numel() / k;
                  Tensor dx, dw, db;
                  if (node.needs_grad(0)) {
                    dx = Tensor::empty(x.shape());
                    linear_input_grad(g.data(), m, n, weight_view(w), dx.data(), false,
                                      kF32Compute);
                  }
                  if (node.needs_grad(1)) {
                    dw = Tensor::empty(w.shape());
                    linear_weight_grad(g.data(), x.data(), m, n, k, dw.data(), false);
                  }
                  if (node.needs_grad(2)) db = column_sums(g, n);
                  return std::vector<Tensor>{dx, dw, db};
                });
}

Tensor linear(const Tensor& x, const Weight& w, const Tensor& bias, const ComputeChoice& compute,
              bool values) {
  int64_t n = w.rows(), k = w.cols();
  check_linear(x, n, k, bias);
  Shape out_shape = x.shape();
  out_shape.back() = n;
  Tensor y = values ? linear_values(x, w, bias, compute) : Tensor::zeros(out_shape);
  return record(y, "linear_frozen", {x, bias}, {}, [w, n, k, compute](Node& node, const Tensor& g) {
    Tensor dx, db;
    if (node.needs_grad(0)) {
      Shape s = g.shape();
      s.back() = k;
      dx = Tensor::empty(s);
      linear_input_grad(g.data(), g.numel() / n, n, w, dx.data(), false, compute);
    }
    if (node.needs_grad(1)) db = column_sums(g, n);
    return std::vector<Tensor>{dx, db};
  });
}

Tensor linear_gathered(const Tensor& x, const Tensor& source, std::span<const int64_t> rows,
                       const Tensor& w) {
  GLM4_CHECK(w.rank() == 2, "[linear_gathered] weight must be 2-D, got ", shape_str(w.shape()));
  const int64_t n = w.dim(0), k = w.dim(1), m = int64_t(rows.size());
  GLM4_CHECK(
      x.rank() == 2 && x.dim(0) == m && x.dim(1) == k && source.rank() == 2 && source.dim(1) == k,
      "[linear_gathered] x ", shape_str(x.shape()), " as ", m, " rows of source ",
      shape_str(source.shape()), " with weight ", shape_str(w.shape()));
  check_rows_within("linear_gathered", rows, source);
  if (!strictly_increasing(rows))
    return linear(x, w, Tensor());  // repeated rows: x's gradient is not a set of distinct rows
  std::vector<int64_t> kept(rows.begin(), rows.end());
  Tensor y = linear_values(x, weight_view(w), Tensor(), kF32Compute);  // as linear computes it
  const int64_t N = source.dim(0);
  Tensor out =
      record(y, "linear_gathered", {source, w}, {source.detach(), w.detach()}, {0},
             [kept, n, k, m](Node& node, const Tensor& g) {
               const Tensor& source = node.saved[0];
               const Tensor& w = node.saved[1];
               Tensor dx, dw;
               if (node.needs_grad(0)) {  // x's rows of source's gradient
                 dx = Tensor::empty({m, k});
                 linear_input_grad(g.data(), m, n, weight_view(w), dx.data(), false, kF32Compute);
               }
               if (node.needs_grad(1)) {
                 Tensor x = Tensor::empty({m, k});
                 copy_rows(source.data(), kept, k, x.data());
                 dw = Tensor::empty(w.shape());
                 linear_weight_grad(g.data(), x.data(), m, n, k, dw.data(), false);
               }
               return std::vector<Tensor>{dx, dw};
             });
  if (const auto& node = out.grad_fn()) node->set_grad_rows(0, std::move(kept), N);
  return out;
}

Tensor add_low_rank(Tensor y, const Tensor& h, const Tensor& B, float scale) {
  GLM4_CHECK(B.rank() == 2 && h.rank() >= 1 && h.dim(-1) == B.dim(1) && y.rank() == h.rank() &&
                 y.dim(-1) == B.dim(0) && y.numel() / B.dim(0) == h.numel() / B.dim(1),
             "[add_low_rank] y ", shape_str(y.shape()), ", h ", shape_str(h.shape()), ", B ",
             shape_str(B.shape()));
  const int64_t n = B.dim(0), r = B.dim(1), m = h.numel() / r;
  Tensor out = y.detach();  // the same storage, without y's graph
  sgemm(false, true, m, n, r, scale, h.data(), r, B.data(), r, 1.0f, out.data(), n);
  return record(
      out, "add_low_rank", {y, h, B}, {h.detach(), B.detach()},
      [m, n, r, scale](Node& node, const Tensor& g) {
        const Tensor& h = node.saved[0];
        const Tensor& B = node.saved[1];
        Tensor dh, dB;
        if (node.needs_grad(1)) {  // dh = scale * g B
          dh = Tensor::empty(h.shape());
          sgemm(false, false, m, r, n, scale, g.data(), n, B.data(), r, 0.0f, dh.data(), r);
        }
        if (node.needs_grad(2)) {  // dB = scale * g^T h
          dB = Tensor::empty(B.shape());
          sgemm(true, false, n, r, m, scale, g.data(), n, h.data(), r, 0.0f, dB.data(), r);
        }
        return std::vector<Tensor>{node.needs_grad(0) ? g : Tensor(), dh, dB};
      });
}

}  // namespace glm4::ops
