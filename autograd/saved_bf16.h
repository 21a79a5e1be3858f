// Saved activations held in bf16 between forward and backward, as PyTorch's bf16 training keeps
// them. Under bf16 compute a decoder layer opens a SavedInBf16 for its forward: the ops that
// record a node offer the activations their backward reads (a LoRA product's input, a norm's
// input, a SwiGLU's gate and up; see record() in node.h), and pack() at the end of the layer
// rounds them to bf16 in half the bytes. Backward widens each one when it first reads it. The
// fp32 compute path never opens one, so it stays exact.
#pragma once
#include <memory>
#include <vector>

#include "autograd/tensor.h"

namespace glm4 {

class SavedInBf16 {
 public:
  // Off: offers go to an enclosing scope, if any, and pack() does nothing.
  explicit SavedInBf16(bool on);
  ~SavedInBf16();
  SavedInBf16(const SavedInBf16&) = delete;
  SavedInBf16& operator=(const SavedInBf16&) = delete;

  // Packs every offered storage that is still alive (in a recompute() rerun, whose backward comes
  // next, rounds them in place instead). Call when the forward no longer reads them: other views
  // of a packed storage see the rounded values.
  void pack();

  // Offers t's storage to the innermost open scope on this thread (nothing when none is open).
  static void offer(const Tensor& t);

 private:
  std::vector<std::weak_ptr<Storage>> offered_;
  SavedInBf16* outer_ = nullptr;
  bool on_;
};

}  // namespace glm4
