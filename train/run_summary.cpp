// Counting what a run trains and reads, and saying it in two lines.
#include "train/run_summary.h"

#include <cmath>
#include <cstdio>

#include "base/check.h"

namespace glm4 {

namespace {
// 1234567 -> "1.23M".
std::string count(double n) {
  char buf[32];
  if (n >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else if (n >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else if (n >= 1e4)
    std::snprintf(buf, sizeof buf, "%.1fK", n / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

int64_t tokens_of(const Dataset& d) {
  int64_t n = 0;
  for (const Example& e : d.examples) n += int64_t(e.ids.size());
  return n;
}

std::string what_is_trained(const TrainRun& run) {
  const TrainConfig& c = run.config;
  if (c.full) return "every parameter (--full)";
  std::string targets;
  for (const std::string& t : run.lora.targets) targets += (targets.empty() ? "" : ",") + t;
  return str_cat(run.lora.dora ? "DoRA" : "LoRA", " r ", run.lora.rank, " alpha ", run.lora.alpha,
                 " on ", targets,
                 run.lora.num_layers > 0 ? str_cat(" of the last ", run.lora.num_layers, " layers")
                                         : std::string());
}
}  // namespace

nlohmann::json run_summary(TrainRun& run, int64_t batches_per_epoch) {
  int64_t total = 0, trainable = 0;
  run.model->visit([&](const std::string&, Param& p) {
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    total += n;
  });
  for (const Tensor& t : run.tensors) trainable += t.numel();
  if (!run.config.full) total += trainable;  // the adapters come on top of the model
  const int64_t tokens = tokens_of(run.train), targets = run.train.target_tokens;
  const double steps_per_epoch = double(batches_per_epoch) / double(run.config.grad_accum);
  return {{"trainable_params", trainable},
          {"total_params", total},
          {"trainable_share", total > 0 ? double(trainable) / double(total) : 0.0},
          {"train_examples", run.train.examples.size()},
          {"valid_examples", run.valid.examples.size()},
          {"train_tokens", tokens},
          {"target_tokens", targets},
          {"masked_share", tokens > 0 ? 1.0 - double(targets) / double(tokens) : 0.0},
          {"steps_per_epoch", steps_per_epoch},
          {"epochs", steps_per_epoch > 0 ? double(run.config.iters) / steps_per_epoch : 0.0}};
}

std::string describe_run_summary(const nlohmann::json& s, const TrainRun& run) {
  const TrainConfig& c = run.config;
  char share[32], masked[32], epochs[64];
  std::snprintf(share, sizeof share, "%.2f%%", 100 * s["trainable_share"].get<double>());
  std::snprintf(masked, sizeof masked, "%.1f%%", 100 * s["masked_share"].get<double>());
  const double per_epoch = s["steps_per_epoch"].get<double>();
  std::snprintf(epochs, sizeof epochs, "%.*f steps per epoch; %lld steps = %.2f epochs",
                per_epoch == std::floor(per_epoch) ? 0 : 2, per_epoch, (long long)c.iters,
                s["epochs"].get<double>());
  return str_cat("trainable: ", count(s["trainable_params"].get<double>()), " of ",
                 count(s["total_params"].get<double>()), " parameters (", share, "), ",
                 what_is_trained(run), "\ndata: ", s["train_examples"].get<int64_t>(),
                 " training examples (", s["valid_examples"].get<int64_t>(), " validation), ",
                 count(s["train_tokens"].get<double>()), " tokens, ", masked, " without loss",
                 c.mask_prompt ? " (--mask-prompt)" : "", "; ", c.batch_size, " examples a batch",
                 c.grad_accum > 1 ? str_cat(" x ", c.grad_accum) : "", c.pack ? " (packed)" : "",
                 ", ", epochs, "\n", kernel_report(run.compute).describe());
}

}  // namespace glm4
