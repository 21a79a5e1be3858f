#include "autograd/saved_bf16.h"

#include "autograd/recompute.h"

namespace glm4 {

namespace {
thread_local SavedInBf16* t_open = nullptr;
}

SavedInBf16::SavedInBf16(bool on) : on_(on) {
  if (!on_) return;
  outer_ = t_open;
  t_open = this;
}

SavedInBf16::~SavedInBf16() {
  if (on_) t_open = outer_;
}

void SavedInBf16::pack() {
  // A checkpoint's rerun runs the layer's backward right after: packing would only copy twice.
  const bool in_place = recompute_rerunning();
  for (const std::weak_ptr<Storage>& offered : offered_)
    if (std::shared_ptr<Storage> storage = offered.lock())
      in_place ? storage->round_to_bf16() : storage->pack_bf16();
  offered_.clear();
}

void SavedInBf16::offer(const Tensor& t) {
  if (t_open && t.defined()) t_open->offered_.push_back(t.impl()->storage);
}

}  // namespace glm4
