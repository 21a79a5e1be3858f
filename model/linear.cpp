#include "model/linear.h"

#include <cmath>

#include "base/check.h"
#include "autograd/ops.h"
#include "base/parallel.h"
#include "autograd/kernels/gemm.h"
#include "model/forward_context.h"

namespace glm4 {

Linear::Linear(int64_t in, int64_t out, bool has_bias, int slot)
    : in_features(in), out_features(out), seed_slot(slot) {
  weight.shape = {out, in};
  if (has_bias) bias.shape = {out};
}

Tensor Linear::forward(const Tensor& x, const ForwardContext& ctx) const {
  Tensor y = linear(x, weight, bias.value);
  if (!lora) return y;
  Tensor in = x;
  if (ctx.training && lora->dropout > 0)
    in = ops::dropout(x, lora->dropout, ctx.seed_for(ctx.layer_index, seed_slot));
  return ops::add_low_rank(std::move(y), ops::linear(in, lora->lora_A, Tensor()), lora->lora_B, lora->scale);
}

void Linear::visit(const std::string& prefix, const ParamVisitor& fn) {
  fn(prefix + ".weight", weight);
  if (!bias.shape.empty()) fn(prefix + ".bias", bias);
}

void Linear::add_lora(int64_t rank, float scale, float dropout, std::mt19937_64& rng) {
  GLM4_CHECK(rank > 0, "LoRA rank must be positive, got ", rank);
  lora = std::make_unique<LoraWeights>();
  lora->lora_A = Tensor::empty({rank, in_features});
  double bound = 1.0 / std::sqrt(double(in_features));
  for (int64_t i = 0; i < lora->lora_A.numel(); ++i) {
    double u = double(rng() >> 11) * (1.0 / 9007199254740992.0);  // [0, 1), 53 bits
    lora->lora_A.data()[i] = float((2.0 * u - 1.0) * bound);
  }
  lora->lora_B = Tensor::zeros({out_features, rank});
  lora->lora_A.set_requires_grad(true);
  lora->lora_B.set_requires_grad(true);
  lora->scale = scale;
  lora->dropout = dropout;
}

void Linear::merge_lora(DType dtype) {
  Tensor w = weight.to_f32();  // [out, in]
  if (lora) {
    int64_t r = lora->lora_A.dim(0);
    // w += scale * B [out, r] @ A [r, in]
    sgemm(false, false, out_features, in_features, r, lora->scale, lora->lora_B.data(), r,
          lora->lora_A.data(), in_features, 1.0f, w.data(), in_features);
  }
  weight.assign(Weight::from_f32(w.data(), out_features, in_features, dtype));
  lora.reset();
}

}  // namespace glm4
