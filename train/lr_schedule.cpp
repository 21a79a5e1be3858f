// Learning-rate schedules (see lr_schedule.h for the exact formulas).
#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "base/check.h"

namespace glm4 {

void LrSchedule::validate() const {
  GLM4_CHECK(kind == "constant" || kind == "cosine", "[lr_schedule] unknown kind '", kind,
             "' (expected constant or cosine)");
  GLM4_CHECK(std::isfinite(lr) && lr >= 0, "[lr_schedule] learning_rate must be >= 0, got ", lr);
  GLM4_CHECK(warmup >= 0, "[lr_schedule] warmup must be >= 0, got ", warmup);
  GLM4_CHECK(total_steps >= 0, "[lr_schedule] total_steps must be >= 0, got ", total_steps);
  GLM4_CHECK(std::isfinite(min_lr) && min_lr >= 0, "[lr_schedule] min_lr must be >= 0, got ",
             min_lr);
  if (kind == "cosine") {
    GLM4_CHECK(total_steps > 0, "[lr_schedule] cosine needs total_steps > 0");
    GLM4_CHECK(warmup <= total_steps, "[lr_schedule] warmup (", warmup, ") exceeds total_steps (",
               total_steps, ")");
    GLM4_CHECK(min_lr <= lr, "[lr_schedule] min_lr (", min_lr, ") exceeds learning_rate (", lr,
               ")");
  }
}

double LrSchedule::at(int64_t step) const {
  validate();
  GLM4_CHECK(step >= 0, "[lr_schedule] step must be >= 0, got ", step);
  if (step < warmup) return lr * double(step + 1) / double(warmup);
  if (kind == "constant") return lr;
  const int64_t decay_steps = total_steps - warmup;
  if (decay_steps == 0) return min_lr;
  const double progress = std::min(1.0, double(step - warmup) / double(decay_steps));
  return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace glm4
