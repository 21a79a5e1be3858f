// Recomputation (what Hugging Face calls gradient checkpointing): run a block without keeping
// its activations, and run it again in the backward pass. Only the block's inputs are saved.
#pragma once
#include <functional>
#include <vector>

#include "autograd/tensor.h"

namespace glm4 {

using Block = std::function<Tensor(const std::vector<Tensor>& inputs)>;

// Returns fn(inputs). With grad mode on, the output is linked to the inputs and to every
// trainable parameter fn uses (even when no input requires grad: the PEFT#137 trap), and the
// backward pass reruns fn to get the gradients. fn must be deterministic (seeded dropout).
Tensor recompute(const Block& fn, const std::vector<Tensor>& inputs);

// True on this thread while recompute() runs its block without grad for a backward pass to
// rerun: ops that compute differently for inference keep their training path there, so both
// runs of the block agree.
bool recompute_pending();

// True on this thread while a backward pass reruns a recompute() block: the block's output is
// then only the root its gradient flows back from, and its values are never read.
bool recompute_rerunning();

}  // namespace glm4
