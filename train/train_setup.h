// Everything a training run holds before its first step, as mlx-lm's tuner/lora.py prepares it
// for tuner/trainer.py: the model and its compute, the data splits, the trainable parameters
// (LoRA, DoRA, full or --init-adapter), the data-parallel reducer, AdamW and a resumed state.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/progress_bar.h"
#include "dataset/dataset.h"
#include "model/compute_choice.h"
#include "model/glm4_model.h"
#include "model/lora.h"
#include "train/adamw.h"
#include "train/distributed.h"
#include "train/grad_reducer.h"
#include "train/train_config.h"
#include "train/training_state.h"

namespace glm4 {

struct TrainRun {
  TrainConfig config;  // validated; --fine-tune-type full has set `full`
  std::unique_ptr<Glm4Model> model;
  ComputeChoice compute;
  LoraConfig lora;       // what adapters are saved with (an --init-adapter's own)
  Dataset train, valid;  // valid is empty without a validation split
  std::vector<std::pair<std::string, Tensor>> params;  // the trainable tensors, by name
  std::vector<Tensor> tensors;                         // the same, in that order
  std::unique_ptr<GradientReducer> reducer;            // data-parallel runs only
  AdamW optimizer;
  TrainState state;  // where a --resume left off, else step 0
};

// Validates `config` and builds the run on this rank; warnings go to `bar`. Throws glm4::Error
// naming the flag or file at fault. Every rank checks at the end that it holds the same
// parameters as the others.
TrainRun set_up_training(const TrainConfig& config, Distributed& group, ProgressBar& bar);

// Refuses (glm4::Error naming --lora-targets or --full) a run whose gradients and AdamW moments, 3
// fp32 values a trainable parameter, need more than `available` bytes (the memory left once the
// model and adapters are loaded; < 0: unknown, nothing checked), instead of the kernel killing it
// in its first step.
void check_training_memory(const TrainConfig& c, int64_t trainable, int64_t available);

}  // namespace glm4
