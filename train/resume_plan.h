// What `glm4 train --resume CHECKPOINT` runs: the checkpoint's own settings, with the settings
// given again on the command line either applied (and said) where the run stays the same run, or
// refused naming the flag where they would make it another run.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/train_config.h"

namespace glm4 {

// How a setting given again with another value is treated on resume.
enum class OnResume {
  kApply,   // applied from the checkpoint's step on, and reported (--learning-rate, --iters ...)
  kRefuse,  // the run would become another run (--lora-rank, --batch-size, --seed ...)
  kMachine  // how this machine runs it, not stored (--mmap, --no-mmap): the command line's
};
// Every key of train_settings.h has a rule (a test walks the list).
OnResume on_resume(const std::string& key);

struct ResumePlan {
  TrainConfig config;              // what the resumed run trains with
  std::vector<std::string> notes;  // "--learning-rate 0.002 -> 0.001 from step 400"
  int64_t step = 0;                // where the checkpoint stands
};

// `given`: the settings named on the command line or in a --config file, by key. Settings not
// given are the checkpoint's; --out, when not given, is the checkpoint's directory; --model and
// --data may name other paths (their fingerprints are checked when the run starts). Throws
// glm4::Error naming every refused flag with the run's value and the one given.
ResumePlan plan_resume(const std::string& checkpoint, const nlohmann::json& given);

// Throws glm4::Error naming each setting of `c` that differs from `saved` (the settings stored in
// `checkpoint`) and is refused on resume: "--lora-rank 16 (the run has 8)".
void check_same_run(const std::string& checkpoint, const TrainConfig& saved, const TrainConfig& c);

}  // namespace glm4
