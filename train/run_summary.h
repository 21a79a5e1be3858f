// The start-of-run summary of `glm4 train`: what is trained (parameters and their share), on
// what (examples, tokens, the share without loss), how long an epoch is, and what computes it.
// Printed before the first step and written into the first line of metrics.jsonl.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "train/train_setup.h"

namespace glm4 {

// {"trainable_params", "total_params", "trainable_share", "train_examples", "valid_examples",
//  "train_tokens", "target_tokens", "masked_share", "steps_per_epoch", "epochs"}; an epoch is
// `batches_per_epoch` batches of the training split, --grad-accum of them a step.
nlohmann::json run_summary(TrainRun& run, int64_t batches_per_epoch);

// The same as lines a person reads ("trainable: 1.2M of 10.0M parameters (12.0%), LoRA r 8 ...").
std::string describe_run_summary(const nlohmann::json& summary, const TrainRun& run);

}  // namespace glm4
