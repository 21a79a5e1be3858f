#include "model/linear.h"

#include <cmath>
#include <cstring>

#include "autograd/kernels/gemm.h"
#include "autograd/kernels/linear_batch.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "base/check.h"
#include "base/parallel.h"
#include "model/dora.h"
#include "model/forward_context.h"

namespace glm4 {

Linear::Linear(int64_t in, int64_t out, bool has_bias, int slot)
    : in_features(in), out_features(out), seed_slot(slot) {
  weight.shape = {out, in};
  if (has_bias) bias.shape = {out};
}

Tensor Linear::forward(const Tensor& x, const ForwardContext& ctx) const {
  return forward_values(x, nullptr, ctx, true);
}

Tensor Linear::forward(const Tensor& x, const GatheredRows& from, const ForwardContext& ctx) const {
  return forward_values(x, &from, ctx, true);
}

Tensor Linear::forward_unread(const Tensor& x, const ForwardContext& ctx) const {
  return forward_values(x, nullptr, ctx, false);
}

Tensor Linear::forward_values(const Tensor& x, const GatheredRows* from, const ForwardContext& ctx,
                              bool values) const {
  Tensor y;
  if (lora) {
    const bool dropped = ctx.training && lora->dropout > 0;
    Tensor in = x;
    const int slot = lora->dropout_slot >= 0 ? lora->dropout_slot : seed_slot;
    if (dropped) in = ops::dropout(x, lora->dropout, ctx.seed_for(ctx.layer_index, slot));
    if (lora->dora()) {
      y = dora_forward(x, in, weight, bias.value, *lora, ctx.compute);
    } else {
      y = linear(x, weight, bias.value, ctx.compute, values);
      const Tensor h = from && !dropped
                           ? ops::linear_gathered(x, from->source, from->rows, lora->lora_A)
                           : ops::linear(in, lora->lora_A, Tensor());
      y = ops::add_low_rank(std::move(y), h, lora->lora_B, lora->scale);
    }
  } else {
    y = linear(x, weight, bias.value, ctx.compute, values);
  }
  if (ctx.adapter_rows && !resident.empty()) add_resident_deltas(x, y, *ctx.adapter_rows);
  return y;
}

bool Linear::frozen_only() const {
  return !weight.value.defined() && !weight.frozen.empty() && !lora && resident.empty();
}

std::vector<Tensor> forward_each(std::span<const Linear* const> layers, const Tensor& x,
                                 const ForwardContext& ctx) {
  std::vector<Tensor> out;
  const int64_t in = layers.empty() ? 0 : layers[0]->in_features;
  const int64_t rows = in > 0 ? x.numel() / in : 0;
  bool batch = !GradMode::enabled() && rows <= kBatchedLinearRows && x.dim(-1) == in;
  for (const Linear* l : layers) batch = batch && l->frozen_only() && l->in_features == in;
  if (!batch) {
    for (const Linear* l : layers) out.push_back(l->forward(x, ctx));
    return out;
  }
  std::vector<LinearProduct> products;
  for (const Linear* l : layers) {
    Shape shape = x.shape();
    shape.back() = l->out_features;
    out.push_back(Tensor::empty(shape));
    products.push_back({x.data(), rows, &l->weight.frozen, out.back().data()});
  }
  linear_forward_batch(products, ctx.compute);
  for (size_t i = 0; i < layers.size(); ++i) {  // y += b, as linear adds its bias
    if (!layers[i]->bias.value.defined()) continue;
    const int64_t n = layers[i]->out_features;
    const float* b = layers[i]->bias.value.data();
    float* y = out[i].data();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j) y[r * n + j] += b[j];
  }
  return out;
}

std::vector<int64_t> resident_tokens(const AdapterRows& rows, int64_t n, size_t slot) {
  const int64_t R = int64_t(rows.slots.size());
  GLM4_CHECK(
      rows.offsets.size() == size_t(R) + 1 && rows.offsets.front() == 0 && rows.offsets.back() == n,
      "[linear] adapter rows end at ", rows.offsets.back(), " for ", n, " tokens");
  std::vector<int64_t> tokens;
  for (int64_t r = 0; r < R; ++r)
    if (rows.slots[size_t(r)] == int32_t(slot))
      for (int64_t t = rows.offsets[size_t(r)]; t < rows.offsets[size_t(r) + 1]; ++t)
        tokens.push_back(t);
  return tokens;
}

void Linear::add_resident_deltas(const Tensor& x, Tensor& y, const AdapterRows& rows) const {
  GLM4_CHECK(!GradMode::enabled(),
             "[linear] per-row adapters are for inference; run under NoGradGuard");
  const int64_t N = x.numel() / in_features;
  for (size_t s = 0; s < resident.size(); ++s) {
    const LoraWeights* w = resident[s].get();
    if (!w) continue;
    const std::vector<int64_t> tokens = resident_tokens(rows, N, s);
    if (tokens.empty()) continue;
    // Gather this adapter's rows of x and y, add its low-rank product as the live path does,
    // scatter the rows back.
    const int64_t n = int64_t(tokens.size());
    Tensor xg = Tensor::empty({n, in_features}), yg = Tensor::empty({n, out_features});
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = tokens[size_t(i)];
      std::memcpy(xg.data() + i * in_features, x.data() + t * in_features,
                  size_t(in_features) * sizeof(float));
      std::memcpy(yg.data() + i * out_features, y.data() + t * out_features,
                  size_t(out_features) * sizeof(float));
    }
    yg =
        ops::add_low_rank(std::move(yg), ops::linear(xg, w->lora_A, Tensor()), w->lora_B, w->scale);
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(y.data() + tokens[size_t(i)] * out_features, yg.data() + i * out_features,
                  size_t(out_features) * sizeof(float));
  }
}

void Linear::visit(const std::string& prefix, const ParamVisitor& fn) {
  fn(prefix + ".weight", weight);
  if (!bias.shape.empty()) fn(prefix + ".bias", bias);
}

void Linear::add_lora(int64_t rank, float scale, float dropout, std::mt19937_64& rng) {
  lora = make_lora(rank, scale, dropout, rng);
}

std::unique_ptr<LoraWeights> Linear::make_lora(int64_t rank, float scale, float dropout,
                                               std::mt19937_64& rng,
                                               const LoraWeights* share_a) const {
  GLM4_CHECK(rank > 0, "LoRA rank must be positive, got ", rank);
  auto w = std::make_unique<LoraWeights>();
  if (share_a) {
    GLM4_CHECK(share_a->lora_A.shape() == Shape({rank, in_features}),
               "[linear] a shared LoRA A of shape ", shape_str(share_a->lora_A.shape()),
               " does not fit a layer with ", in_features, " inputs");
    w->lora_A = share_a->lora_A;
  } else {
    w->lora_A = Tensor::empty({rank, in_features});
    double bound = 1.0 / std::sqrt(double(in_features));
    for (int64_t i = 0; i < w->lora_A.numel(); ++i) {
      double u = double(rng() >> 11) * (1.0 / 9007199254740992.0);  // [0, 1), 53 bits
      w->lora_A.data()[i] = float((2.0 * u - 1.0) * bound);
    }
  }
  w->lora_B = Tensor::zeros({out_features, rank});
  w->lora_A.set_requires_grad(true);
  w->lora_B.set_requires_grad(true);
  w->scale = scale;
  w->dropout = dropout;
  return w;
}

void Linear::merge_lora(DType dtype) {
  Tensor w = lora ? adapted_weight(weight, *lora) : weight.to_f32();  // [out, in]
  weight.assign(Weight::from_f32(w.data(), out_features, in_features, dtype));
  lora.reset();
}

}  // namespace glm4
