#include "autograd/recompute.h"

#include "autograd/node.h"
#include "base/check.h"

namespace glm4 {

namespace {
class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(GradMode::enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(prev_); }

 private:
  bool prev_;
};
thread_local int pending_depth = 0;
thread_local int rerun_depth = 0;

class PendingScope {
 public:
  PendingScope() { ++pending_depth; }
  ~PendingScope() { --pending_depth; }
};

class RerunScope {
 public:
  RerunScope() { ++rerun_depth; }
  ~RerunScope() { --rerun_depth; }
};
}  // namespace

bool recompute_pending() { return pending_depth > 0; }
bool recompute_rerunning() { return rerun_depth > 0; }

Tensor recompute(const Block& fn, const std::vector<Tensor>& inputs) {
  if (!GradMode::enabled()) return fn(inputs);
  bool& saw = saw_trainable_in_no_grad();
  bool saw_outside = saw;
  saw = false;
  Tensor out;
  {
    NoGradGuard no_grad;
    PendingScope pending;
    out = fn(inputs);
  }
  bool touches_trainable = saw || any_requires_grad(inputs);
  saw = saw_outside || saw;
  if (!touches_trainable) return out;

  std::vector<bool> input_requires;
  auto node = std::make_shared<Node>();
  node->op = "recompute";
  for (const Tensor& t : inputs) {
    input_requires.push_back(t.requires_grad());
    Edge e;
    if (t.requires_grad()) {
      if (t.grad_fn())
        e.node = t.grad_fn();
      else
        e.leaf = t.impl_ptr();
    }
    node->inputs.push_back(e);
    node->saved.push_back(t.detach());
  }
  node->backward = [fn, input_requires](Node& self, const Tensor& g) {
    std::vector<Tensor> leaves;
    for (size_t i = 0; i < self.saved.size(); ++i) {
      Tensor t = self.saved[i].detach();
      t.set_requires_grad(input_requires[i]);
      leaves.push_back(t);
    }
    Tensor recomputed;
    {
      EnableGradGuard grad_on;
      {
        RerunScope rerun;
        recomputed = fn(leaves);
      }
      // Parameters inside accumulate their gradients here; inputs' land in the leaves.
      backward({recomputed}, {g});
    }
    std::vector<Tensor> grads;
    for (size_t i = 0; i < leaves.size(); ++i)
      grads.push_back(input_requires[i] ? leaves[i].grad() : Tensor());
    return grads;
  };
  // The block's trainable tensors may all be inside it, so link the output directly.
  out.impl()->requires_grad = true;
  out.impl()->grad_fn = std::move(node);
  return out;
}

}  // namespace glm4
