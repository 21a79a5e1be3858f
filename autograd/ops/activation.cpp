// silu, fused swiglu (on a gate_up tensor, on gate and up, and times a row scale), softmax over
// the last dimension.
#include <cmath>
#include <vector>

#include "autograd/kernels/vec_math.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "base/check.h"
#include "base/parallel.h"

namespace glm4::ops {

namespace {
constexpr int64_t kGrain = 1 << 13;

// A per-thread scratch row for sigmoid values.
float* scratch(int64_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < size_t(n)) buf.resize(size_t(n));
  return buf.data();
}
}  // namespace

Tensor silu(const Tensor& x) {
  Tensor y = Tensor::empty(x.shape());
  const float* px = x.data();
  float* py = y.data();
  parallel_for(x.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    kernels::sigmoid(px + lo, py + lo, hi - lo);
    for (int64_t i = lo; i < hi; ++i) py[i] *= px[i];
  });
  return record(y, "silu", {x}, {x.detach()}, [](Node& n, const Tensor& g) {
    const Tensor& x = n.saved[0];
    Tensor dx = Tensor::empty(x.shape());
    const float* px = x.data();
    const float* pg = g.data();
    float* pd = dx.data();
    parallel_for(x.numel(), kGrain, [&](int64_t lo, int64_t hi) {
      kernels::sigmoid(px + lo, pd + lo, hi - lo);
      for (int64_t i = lo; i < hi; ++i) pd[i] = pg[i] * pd[i] * (1.0f + px[i] * (1.0f - pd[i]));
    });
    return std::vector<Tensor>{dx};
  });
}

namespace {

// out = silu(gate) * up over one row of n, and its gradient: (gate * s) * up with s the
// sigmoid, the order of silu then mul, so the fused forms give the same bits as that pair.
void swiglu_row(const float* gate, const float* up, float* out, int64_t n) {
  kernels::sigmoid(gate, out, n);
  for (int64_t j = 0; j < n; ++j) out[j] = gate[j] * out[j] * up[j];
}

void swiglu_grad_row(const float* gate, const float* up, const float* grad, float* dgate,
                     float* dup, int64_t n) {
  float* sig = scratch(n);
  kernels::sigmoid(gate, sig, n);
  for (int64_t j = 0; j < n; ++j) {
    const float s = sig[j];
    dup[j] = grad[j] * (gate[j] * s);
    dgate[j] = grad[j] * up[j] * s * (1.0f + gate[j] * (1.0f - s));
  }
}

int64_t rows_grain(int64_t inter) {
  return std::max<int64_t>(1, kGrain / std::max<int64_t>(inter, 1));
}

}  // namespace

Tensor swiglu(const Tensor& gate_up) {
  GLM4_CHECK(gate_up.rank() >= 1 && gate_up.dim(-1) % 2 == 0, "[swiglu] last dim of ",
             shape_str(gate_up.shape()), " must be even (gate | up)");
  int64_t two_i = gate_up.dim(-1), inter = two_i / 2,
          rows = gate_up.numel() / std::max<int64_t>(two_i, 1);
  Shape out_shape = gate_up.shape();
  out_shape.back() = inter;
  Tensor y = Tensor::empty(out_shape);
  const float* px = gate_up.data();
  float* py = y.data();
  parallel_for(rows, rows_grain(inter), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r)
      swiglu_row(px + r * two_i, px + r * two_i + inter, py + r * inter, inter);
  });
  return record(y, "swiglu", {gate_up}, {gate_up.detach()}, {0},
                [rows, inter](Node& n, const Tensor& g) {
                  const Tensor& x = n.saved[0];
                  Tensor dx = Tensor::empty(x.shape());
                  const float* px = x.data();
                  const float* pg = g.data();
                  float* pd = dx.data();
                  parallel_for(rows, rows_grain(inter), [&](int64_t lo, int64_t hi) {
                    for (int64_t r = lo; r < hi; ++r) {
                      const int64_t at = r * 2 * inter;
                      swiglu_grad_row(px + at, px + at + inter, pg + r * inter, pd + at,
                                      pd + at + inter, inter);
                    }
                  });
                  return std::vector<Tensor>{dx};
                });
}

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  GLM4_CHECK(gate.rank() >= 1 && gate.shape() == up.shape(), "[swiglu] gate ",
             shape_str(gate.shape()), " and up ", shape_str(up.shape()), " must have one shape");
  const int64_t inter = gate.dim(-1), rows = gate.numel() / std::max<int64_t>(inter, 1);
  Tensor y = Tensor::empty(gate.shape());
  const float* pg = gate.data();
  const float* pu = up.data();
  float* py = y.data();
  parallel_for(rows, rows_grain(inter), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r)
      swiglu_row(pg + r * inter, pu + r * inter, py + r * inter, inter);
  });
  return record(y, "swiglu", {gate, up}, {gate.detach(), up.detach()}, {0, 1},
                [rows, inter](Node& n, const Tensor& g) {
                  const Tensor &gate = n.saved[0], &up = n.saved[1];
                  Tensor dgate = Tensor::empty(gate.shape()), dup = Tensor::empty(up.shape());
                  parallel_for(rows, rows_grain(inter), [&](int64_t lo, int64_t hi) {
                    for (int64_t r = lo; r < hi; ++r) {
                      const int64_t at = r * inter;
                      swiglu_grad_row(gate.data() + at, up.data() + at, g.data() + at,
                                      dgate.data() + at, dup.data() + at, inter);
                    }
                  });
                  return std::vector<Tensor>{dgate, dup};
                });
}

Tensor swiglu(const Tensor& gate, const Tensor& up, const Tensor& scale) {
  GLM4_CHECK(gate.rank() == 2 && gate.shape() == up.shape() && scale.numel() == gate.dim(0),
             "[swiglu] gate ", shape_str(gate.shape()), ", up ", shape_str(up.shape()),
             " and row scale ", shape_str(scale.shape()));
  const int64_t rows = gate.dim(0), inter = gate.dim(1);
  Tensor y = Tensor::empty(gate.shape());
  float* py = y.data();
  parallel_for(rows, rows_grain(inter), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      float* out = py + r * inter;
      swiglu_row(gate.data() + r * inter, up.data() + r * inter, out, inter);
      const float s = scale.data()[r];
      for (int64_t j = 0; j < inter; ++j) out[j] *= s;
    }
  });
  return record(y, "swiglu_scaled", {gate, up, scale}, {gate.detach(), up.detach(), scale.detach()},
                {0, 1}, [rows, inter](Node& n, const Tensor& g) {
                  const Tensor &gate = n.saved[0], &up = n.saved[1], &scale = n.saved[2];
                  Tensor dgate = Tensor::empty(gate.shape()), dup = Tensor::empty(up.shape());
                  Tensor dscale = n.needs_grad(2) ? Tensor::empty(scale.shape()) : Tensor();
                  parallel_for(rows, rows_grain(inter), [&](int64_t lo, int64_t hi) {
                    std::vector<float> row(static_cast<size_t>(inter));
                    for (int64_t r = lo; r < hi; ++r) {
                      const int64_t at = r * inter;
                      const float* gr = g.data() + at;
                      if (dscale.defined()) {  // d scale = g . h
                        swiglu_row(gate.data() + at, up.data() + at, row.data(), inter);
                        double dot = 0.0;
                        for (int64_t j = 0; j < inter; ++j) dot += double(gr[j]) * row[size_t(j)];
                        dscale.data()[r] = float(dot);
                      }
                      const float s = scale.data()[r];
                      for (int64_t j = 0; j < inter; ++j) row[size_t(j)] = gr[j] * s;
                      swiglu_grad_row(gate.data() + at, up.data() + at, row.data(),
                                      dgate.data() + at, dup.data() + at, inter);
                    }
                  });
                  return std::vector<Tensor>{dgate, dup, dscale};
                });
}

Tensor softmax(const Tensor& x) {
  GLM4_CHECK(x.rank() >= 1, "[softmax] needs at least one dimension, got ", shape_str(x.shape()));
  int64_t cols = x.dim(-1), rows = x.numel() / std::max<int64_t>(cols, 1);
  Tensor y = Tensor::empty(x.shape());
  const float* px = x.data();
  float* py = y.data();
  parallel_for(rows, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const float* in = px + r * cols;
      float* out = py + r * cols;
      const double s = kernels::exp_shifted(in, kernels::max_of(in, cols), out, cols);
      kernels::scale_in_place(out, cols, float(1.0 / s));
    }
  });
  return record(y, "softmax", {x}, {y.detach()}, [rows, cols](Node& n, const Tensor& g) {
    const Tensor& y = n.saved[0];
    Tensor dx = Tensor::empty(y.shape());
    const float* py = y.data();
    const float* pg = g.data();
    float* pd = dx.data();
    parallel_for(rows, 16, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const float* yr = py + r * cols;
        const float* gr = pg + r * cols;
        double dot = 0;
        for (int64_t j = 0; j < cols; ++j) dot += double(yr[j]) * gr[j];
        for (int64_t j = 0; j < cols; ++j) pd[r * cols + j] = yr[j] * (gr[j] - float(dot));
      }
    });
    return std::vector<Tensor>{dx};
  });
}

}  // namespace glm4::ops
