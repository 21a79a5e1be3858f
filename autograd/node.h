// The tape: every op run with gradients on records a Node holding the edges to its inputs,
// the tensors its backward needs (an explicit, countable list), and the backward function,
// written in the op's file right under its forward.
#pragma once
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "autograd/tensor.h"

namespace glm4 {

// Where an input's gradient goes: into the node that produced it, or into a leaf's grad.
struct Edge {
  std::shared_ptr<Node> node;
  std::shared_ptr<TensorImpl> leaf;
  bool active() const { return node || leaf; }
};

struct Node {
  // Returns one gradient per input (undefined where needs_grad(i) is false).
  using Backward = std::function<std::vector<Tensor>(Node& self, const Tensor& grad_out)>;

  const char* op = "";
  std::vector<Edge> inputs;
  std::vector<Tensor> saved;
  Backward backward;
  // Set by an op whose input grad_rows_input gets a gradient on a few rows only (gather_rows,
  // linear_gathered): backward then returns just those rows for it, row i landing on row
  // grad_rows[i] (all distinct) of an input with grad_row_count rows, and the engine adds them
  // where they go. A Mixture-of-Experts layer gathers from one input once per expert; full-size
  // gradients would cost experts x tokens rows.
  std::vector<int64_t> grad_rows;
  int64_t grad_row_count = 0;
  size_t grad_rows_input = 0;

  bool needs_grad(size_t i) const { return i < inputs.size() && inputs[i].active(); }
  // Input `input` takes its gradient as rows `rows` (strictly increasing) of `count` rows.
  void set_grad_rows(size_t input, std::vector<int64_t> rows, int64_t count) {
    grad_rows = std::move(rows);
    grad_row_count = count;
    grad_rows_input = input;
  }
  void release() {  // after backward ran: free what it kept
    saved.clear();
    saved.shrink_to_fit();
    grad_rows.clear();
    grad_rows.shrink_to_fit();
    grad_row_count = 0;
    backward = nullptr;
  }
};

// Gradient recording is on unless a NoGradGuard is alive on this thread.
struct GradMode {
  static bool enabled();
  static void set_enabled(bool on);
};

class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Records `out` as the result of `op` when grad mode is on and some input requires grad;
// otherwise returns `out` unchanged (no node, no saved tensors). `saved` is what backward needs.
Tensor record(Tensor out, const char* op, const std::vector<Tensor>& inputs,
              std::vector<Tensor> saved, Node::Backward backward);

// The same, where saved[i] for each i in bf16_slots is an activation (never a parameter) that an
// open SavedInBf16 scope may keep in bf16 until backward (autograd/saved_bf16.h).
Tensor record(Tensor out, const char* op, const std::vector<Tensor>& inputs,
              std::vector<Tensor> saved, std::initializer_list<size_t> bf16_slots,
              Node::Backward backward);

// True when some input requires grad and grad mode is on (an op may skip work otherwise).
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Set whenever an op sees an input that requires grad while grad mode is off; recompute()
// uses it to learn whether a block touches trainable parameters.
bool& saw_trainable_in_no_grad();

// While alive, tells `fn` during every backward pass on this thread when a leaf's gradient for
// that pass is complete: every recorded edge into the leaf has delivered (for a leaf used inside a
// recompute block, when that block's inner pass is done). The data-parallel reducer uses it to
// start sending finished gradients while backward goes on.
class LeafReadyHook {
 public:
  using Fn = std::function<void(const TensorImpl* leaf)>;
  explicit LeafReadyHook(Fn fn);
  ~LeafReadyHook();
  LeafReadyHook(const LeafReadyHook&) = delete;
  LeafReadyHook& operator=(const LeafReadyHook&) = delete;
  static const Fn* current();  // null when none is installed

 private:
  Fn fn_;
  const Fn* prev_;
};

// Reverse-mode pass from `roots`, seeded with `grads` (a scalar root may pass an undefined
// seed, meaning 1). Leaf gradients accumulate into their grad(); the graph is freed.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads = {});
inline void backward(const Tensor& loss) { backward(std::vector<Tensor>{loss}); }

}  // namespace glm4
