// The training loop behind `glm4 train`: LoRA (or full) fine-tuning with periodic evaluation,
// adapter and checkpoint saves, metrics and progress, early stopping and exact resume.
#pragma once
#include <string>

#include "train/train_config.h"

namespace glm4 {

struct TrainSummary {
  int64_t steps = 0;  // optimizer steps done in total
  double last_loss = 0;
  double first_val_loss = -1;  // before training (-1: no validation set)
  double best_val_loss = -1;
  bool stopped_early = false;
  int signal = 0;  // SIGINT or SIGTERM that stopped the run after step `steps`, which was saved
  int rank = 0;    // of this process in a data-parallel run (rank 0 reports)
};

// Runs the whole job; throws glm4::Error on bad input (before any work) and when the loss
// turns NaN/Inf (the last good adapter and checkpoint stay as they were). Under mpirun every
// rank runs it (data-parallel); an error on any rank ends all of them, naming the rank. SIGINT or
// SIGTERM stop it after the step at hand, saved (train/stop_signals.h; summary.signal says which).
TrainSummary run_training(const TrainConfig& config);

}  // namespace glm4
