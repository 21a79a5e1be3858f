// Learning-rate schedules: linear warmup, then constant or cosine decay.
#pragma once
#include <cstdint>
#include <string>

namespace glm4 {

// Step s is 0-based (the s-th optimizer update).
//  - warmup: for s < warmup, lr * (s + 1) / warmup (so step 0 already moves, and step
//    warmup - 1 reaches lr).
//  - "constant": lr from step `warmup` on.
//  - "cosine": from step `warmup`, with d = total_steps - warmup and
//    progress = min(1, (s - warmup) / d):  min_lr + (lr - min_lr) * (1 + cos(pi * progress)) / 2,
//    i.e. lr at s = warmup, min_lr at s = total_steps and after (Hugging Face's shape).
//    The last step of a run (total_steps - 1) thus still sits just above min_lr.
struct LrSchedule {
  std::string kind = "constant";  // constant | cosine
  double lr = 1e-5;
  int64_t warmup = 0;
  int64_t total_steps = 0;  // cosine only
  double min_lr = 0;        // cosine only

  // Throws glm4::Error naming the field: unknown kind, negative or non-finite values,
  // min_lr > lr, or (cosine) warmup > total_steps or total_steps == 0.
  void validate() const;
  double at(int64_t step) const;  // validates, and step must be >= 0
};

}  // namespace glm4
