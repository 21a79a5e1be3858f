#include "train/train_step.h"

#include <cmath>

#include "base/check.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/tensor_math.h"
#include "infer/score.h"
#include "train/grad_clip.h"

namespace glm4 {

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
    Tensor loss = batch_loss(model, micro_batches[i],
                             {.divide_by = double(result.targets), .recompute_layers = options.recompute_layers,
                              .training = true, .dropout_seed = options.dropout_seed * 64 + i});
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
