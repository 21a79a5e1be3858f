#include "train/train_step.h"

#include <cmath>

#include "base/check.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/tensor_math.h"
#include "train/grad_clip.h"

namespace glm4 {

std::vector<int32_t> shift_labels(const std::vector<int32_t>& labels, int64_t B, int64_t T) {
  std::vector<int32_t> out(size_t(B * T), -100);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t + 1 < T; ++t) out[b * T + t] = labels[b * T + t + 1];
  return out;
}

Tensor batch_loss(const Glm4Model& model, const Batch& batch, double divide_by, bool recompute_layers,
                  bool training, uint64_t dropout_seed) {
  ForwardContext ctx;
  ctx.batch = batch.B;
  ctx.seq = batch.T;
  ctx.positions = batch.positions;
  ctx.mask = attention_mask(batch);
  ctx.training = training;
  ctx.dropout_seed = dropout_seed;
  ctx.recompute_layers = recompute_layers;
  Tensor hidden = model.forward_hidden(batch.input_ids, ctx);
  hidden = ops::reshape(hidden, {batch.B * batch.T, model.config.hidden_size});
  std::vector<int32_t> targets = shift_labels(batch.labels, batch.B, batch.T);
  const Param& head = model.lm_head_weight();
  return ops::linear_cross_entropy(hidden, head.frozen, head.value, targets, divide_by);
}

StepResult train_step(Glm4Model& model, AdamW& optimizer, const std::vector<Batch>& micro_batches,
                      const StepOptions& options) {
  StepResult result;
  for (const Batch& b : micro_batches) {
    result.targets += b.target_tokens;
    for (int32_t len : b.lengths) result.tokens += len;
  }
  optimizer.zero_grad();
  if (result.targets == 0) return result;  // nothing to learn from: no update
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    Tensor loss = batch_loss(model, micro_batches[i], double(result.targets), options.recompute_layers,
                             true, options.dropout_seed * 64 + i);
    result.loss += double(loss.item());
    if (micro_batches[i].target_tokens > 0) backward(loss);
  }
  std::vector<Tensor> params = optimizer.params();
  result.grad_norm = options.max_grad_norm > 0 ? clip_grad_norm(params, options.max_grad_norm)
                                               : grad_norm(params);
  result.finite = std::isfinite(result.loss) && std::isfinite(result.grad_norm);
  if (!result.finite) {
    optimizer.zero_grad();
    return result;
  }
  optimizer.step(options.lr);
  return result;
}

}  // namespace glm4
