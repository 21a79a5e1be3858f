#include "model/dora.h"

#include <cmath>
#include <cstring>

#include "autograd/kernels/gemm.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "base/check.h"
#include "base/parallel.h"

namespace glm4 {

// The norms of the last no-grad forward and the A and B they came from: decoding calls a layer
// once a token, and forming W + scale B A costs r times the product itself.
struct DoraNormCache {
  std::vector<float> a, b, norm;
};

namespace {
Tensor delta_added(const Param& weight, const LoraWeights& lora) {
  Tensor w = weight.to_f32();
  const int64_t out = weight.shape[0], in = weight.shape[1], r = lora.lora_A.dim(0);
  sgemm(false, false, out, in, r, lora.scale, lora.lora_B.data(), r, lora.lora_A.data(), in, 1.0f,
        w.data(), in);
  return w;
}

std::vector<float> row_norms(const Tensor& w) {
  const int64_t rows = w.dim(0), cols = w.dim(1);
  std::vector<float> out(static_cast<size_t>(rows));
  parallel_for(rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float* row = w.data() + i * cols;
      double s = 0;
      for (int64_t k = 0; k < cols; ++k) s += double(row[k]) * double(row[k]);
      out[size_t(i)] = float(std::sqrt(s));
    }
  });
  return out;
}

bool same_values(const std::vector<float>& cached, const Tensor& t) {
  return cached.size() == size_t(t.numel()) &&
         std::memcmp(cached.data(), t.data(), cached.size() * sizeof(float)) == 0;
}
}  // namespace

Tensor adapted_weight(const Param& weight, const LoraWeights& lora) {
  Tensor w = delta_added(weight, lora);
  if (!lora.dora()) return w;
  const std::vector<float> norm = row_norms(w);
  const int64_t rows = w.dim(0), cols = w.dim(1);
  const float* m = lora.magnitude.data();
  parallel_for(rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float g = m[i] / norm[size_t(i)];
      float* row = w.data() + i * cols;
      for (int64_t k = 0; k < cols; ++k) row[k] *= g;
    }
  });
  return w;
}

std::vector<float> dora_weight_norm(const Param& weight, const LoraWeights& lora) {
  DoraNormCache* c = lora.norm_cache.get();
  const bool reuse = !GradMode::enabled();
  if (reuse && c && same_values(c->a, lora.lora_A) && same_values(c->b, lora.lora_B))
    return c->norm;
  std::vector<float> norm = row_norms(delta_added(weight, lora));
  if (reuse) {
    if (!c) lora.norm_cache = std::make_shared<DoraNormCache>(), c = lora.norm_cache.get();
    c->a = lora.lora_A.to_vector();
    c->b = lora.lora_B.to_vector();
    c->norm = norm;
  }
  return norm;
}

Tensor dora_initial_magnitude(const Param& weight) {
  std::vector<float> norm = row_norms(weight.to_f32());
  Tensor m = Tensor::from({int64_t(norm.size())}, norm);
  m.set_requires_grad(true);
  return m;
}

Tensor dora_forward(const Tensor& x, const Tensor& x_dropped, const Param& weight,
                    const Tensor& bias, const LoraWeights& lora, const ComputeChoice& compute) {
  const int64_t out = weight.shape[0];
  GLM4_CHECK(lora.magnitude.numel() == out, "[dora] magnitude has ", lora.magnitude.numel(),
             " values for a layer with ", out, " outputs");
  std::vector<float> norm = dora_weight_norm(weight, lora);
  for (float& v : norm) v = 1.0f / v;
  // g = m / ||V||, the norm a constant: the gradient reaches m alone.
  Tensor g = ops::mul(lora.magnitude, Tensor::from({out}, norm));
  Tensor h = ops::linear(x_dropped, lora.lora_A, Tensor());
  if (x_dropped.impl() == x.impl()) {
    // Without dropout: g * (x W^T + scale * h B^T) + b.
    Tensor y = ops::add_low_rank(linear(x, weight, Tensor(), compute), h, lora.lora_B, lora.scale);
    y = ops::mul(y, g);
    return bias.defined() ? ops::add(y, bias) : y;
  }
  Tensor base = linear(x, weight, bias, compute);
  Tensor base_dropped = linear(x_dropped, weight, Tensor(), compute);
  Tensor low = ops::add_low_rank(Tensor::zeros(base.shape()), h, lora.lora_B, lora.scale);
  Tensor g_minus_one = ops::add(g, Tensor::full({out}, -1.0f));
  return ops::add(base, ops::add(ops::mul(base_dropped, g_minus_one), ops::mul(low, g)));
}

}  // namespace glm4
