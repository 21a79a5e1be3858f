// AdamW with torch.optim.AdamW (1.13, single-tensor path) semantics, bit for bit on CPU: the
// same float constants and the same order of float operations, including torch's two FMAs.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "autograd/tensor.h"

namespace glm4 {

struct AdamWOptions {
  double lr = 1e-3;  // used by step() without an argument; the trainer passes its schedule's lr
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;  // decoupled: p *= 1 - lr * weight_decay
};

// Elements [begin, end) of a flattened parameter.
struct ElementRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

class AdamW {
 public:
  // `params` are trainable leaves; their names only serve error messages and checkpoints.
  // `owned` (empty, or one per parameter): the elements of each parameter this optimizer updates
  // and keeps moments for, the rest being some other rank's (ZeRO stage 1); empty = all of them.
  AdamW(std::vector<std::pair<std::string, Tensor>> params, AdamWOptions options,
        std::vector<ElementRange> owned = {});

  // One update of every parameter that has a gradient (torch skips the others entirely: no
  // decay, and their own step count does not advance). `lr` is a double, as in torch, so that
  // `1 - lr * weight_decay` and `lr / (1 - beta1^t)` round exactly as torch's do.
  void step(double lr);
  void step() { step(options_.lr); }
  void zero_grad();  // drops every parameter's gradient buffer

  const AdamWOptions& options() const { return options_; }
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<Tensor>& params() const { return params_; }

  const std::vector<ElementRange>& owned() const { return owned_; }

  // State for checkpoints, in the order of names(). exp_avg/exp_avg_sq have the parameters'
  // shapes, or are the flat owned pieces [owned()[i].size()] when a parameter is not all owned.
  // step_count() counts step() calls; param_steps() is torch's per-parameter `step`
  // (equal to step_count() unless some parameter went without a gradient on some step).
  int64_t step_count() const { return step_count_; }
  const std::vector<int64_t>& param_steps() const { return param_steps_; }
  const std::vector<Tensor>& exp_avg() const { return exp_avg_; }
  const std::vector<Tensor>& exp_avg_sq() const { return exp_avg_sq_; }
  // Copies a saved state in (moments with the parameters' shapes; the owned elements are kept);
  // `param_steps` empty means every parameter took `step_count` steps.
  void load_state(int64_t step_count, const std::vector<Tensor>& exp_avg,
                  const std::vector<Tensor>& exp_avg_sq,
                  const std::vector<int64_t>& param_steps = {});

 private:
  AdamWOptions options_;
  std::vector<std::string> names_;
  std::vector<Tensor> params_;
  std::vector<ElementRange> owned_;
  std::vector<Tensor> exp_avg_;     // m, like each param
  std::vector<Tensor> exp_avg_sq_;  // v, like each param
  std::vector<int64_t> param_steps_;
  int64_t step_count_ = 0;
};

}  // namespace glm4
