// One optimizer step: forward and backward over the step's micro-batches (gradient
// accumulation with token weighting), global-norm clipping, then AdamW.
#pragma once
#include <cstdint>
#include <vector>

#include "model/glm4_model.h"
#include "train/adamw.h"
#include "train/batching.h"

namespace glm4 {

struct StepOptions {
  double lr = 1e-4;
  double max_grad_norm = 0;  // 0 = no clipping
  bool recompute_layers = false;
  uint64_t dropout_seed = 0;
};

struct StepResult {
  double loss = 0;       // token-weighted mean over the step's targets, before the update
  double grad_norm = 0;  // before clipping
  int64_t tokens = 0;    // tokens processed (padding excluded)
  int64_t targets = 0;   // tokens that carried a loss
  bool finite = true;    // false: loss or gradients were NaN/Inf and no update was made
};

// Labels shifted for next-token prediction: out[b*T + t] = labels[b*T + t + 1], -100 at t = T-1.
std::vector<int32_t> shift_labels(const std::vector<int32_t>& labels, int64_t B, int64_t T);

// Mean loss of one batch, or its sum divided by `divide_by`; records the graph when grad is on.
Tensor batch_loss(const Glm4Model& model, const Batch& batch, double divide_by, bool recompute_layers,
                  bool training, uint64_t dropout_seed);

StepResult train_step(Glm4Model& model, AdamW& optimizer, const std::vector<Batch>& micro_batches,
                      const StepOptions& options);

}  // namespace glm4
