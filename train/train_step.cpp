#include "train/train_step.h"

#include <cmath>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/tensor_math.h"
#include "base/check.h"
#include "infer/score.h"
#include "train/grad_clip.h"

namespace glm4 {

StepResult train_step(Glm4Model& model, AdamW& optimizer, const std::vector<Batch>& micro_batches,
                      const StepOptions& options, GradientReducer* reducer) {
  StepResult result;
  for (const Batch& b : micro_batches) {
    result.targets += b.target_tokens;
    for (int32_t len : b.lengths) result.tokens += len;
  }
  if (reducer) {
    std::vector<int64_t> counts{result.targets, result.tokens};
    reducer->group().sum(counts);
    result.targets = counts[0];
    result.tokens = counts[1];
  }
  optimizer.zero_grad();
  if (result.targets == 0) return result;  // nothing to learn from: no update
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    Tensor loss =
        batch_loss(model, micro_batches[i],
                   {.divide_by = double(result.targets),
                    .recompute_layers = options.recompute_layers,
                    .training = true,
                    .dropout_seed = options.dropout_seed * 64 + uint64_t(options.first_micro) + i});
    result.loss += double(loss.item());
    if (reducer && i + 1 == micro_batches.size())
      reducer->begin();  // sum buckets as backward completes them
    if (micro_batches[i].target_tokens > 0) backward(loss);
  }
  std::vector<Tensor> params = optimizer.params();
  if (reducer) {
    reducer->finish();
    double loss = 0;
    for (const std::vector<double>& part :
         reducer->group().allgather(std::vector<double>{result.loss}))
      loss += part[0];
    result.loss = loss;
    result.grad_norm = reducer->clip(options.max_grad_norm);
  } else {
    result.grad_norm = options.max_grad_norm > 0 ? clip_grad_norm(params, options.max_grad_norm)
                                                 : grad_norm(params);
  }
  result.finite = std::isfinite(result.loss) && std::isfinite(result.grad_norm);
  if (!result.finite) {
    optimizer.zero_grad();
    return result;
  }
  optimizer.step(options.lr);
  if (reducer) reducer->gather_params();
  return result;
}

}  // namespace glm4
