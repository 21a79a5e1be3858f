// One optimizer step: forward and backward over the step's micro-batches (gradient
// accumulation with token weighting), global-norm clipping, then AdamW.
#pragma once
#include <cstdint>
#include <vector>

#include "dataset/batch.h"
#include "model/glm4_model.h"
#include "train/adamw.h"
#include "train/grad_reducer.h"

namespace glm4 {

struct StepOptions {
  double lr = 1e-4;
  double max_grad_norm = 0;  // 0 = no clipping
  bool recompute_layers = false;
  uint64_t dropout_seed = 0;
  int64_t first_micro = 0;  // the step-wide index of the first micro-batch (it seeds dropout)
};

struct StepResult {
  double loss = 0;       // token-weighted mean over the step's targets, before the update
  double grad_norm = 0;  // before clipping
  int64_t tokens = 0;    // tokens processed (padding excluded), over all ranks
  int64_t targets = 0;   // tokens that carried a loss, over all ranks
  bool finite = true;    // false: loss or gradients were NaN/Inf and no update was made
};

// With a reducer (data-parallel), `micro_batches` are this rank's part of the step: the loss is
// weighted by the targets of all ranks, the gradients are summed over the ranks, and every rank
// makes the same update.
StepResult train_step(Glm4Model& model, AdamW& optimizer, const std::vector<Batch>& micro_batches,
                      const StepOptions& options, GradientReducer* reducer = nullptr);

}  // namespace glm4
