// The caching allocator behind tensor storage. Large blocks come from mmap and, when a tensor
// dies, wait in a free list of their size class for the next tensor of that class or one up to
// half its size (the smallest cached block that fits is taken), so a training step that repeats
// the same shapes reuses the same pages: no heap fragmentation (a 1.7 GB LoRA step had ~500 MB
// of it under glibc malloc) and no page faults on them after the first step. MoE steps, whose
// expert batches change size every step, keep about 50-100 MB less cached that way than with exact
// classes only. Blocks below one huge page (2 MB) use the ordinary heap.
#pragma once
#include <cstddef>
#include <utility>

namespace glm4 {

struct PoolBlock {
  void* data = nullptr;
  size_t capacity = 0;  // bytes actually reserved (the size class)
};

// A 64-byte aligned block of at least `bytes`; throws glm4::Error when memory runs out.
PoolBlock pool_allocate(size_t bytes);
void pool_release(PoolBlock block);

// A pool block owned: released to the pool when it goes. Move-only.
class PoolBuffer {
 public:
  PoolBuffer() = default;
  explicit PoolBuffer(size_t bytes) : block_(pool_allocate(bytes)) {}
  PoolBuffer(PoolBuffer&& o) noexcept : block_(std::exchange(o.block_, {})) {}
  PoolBuffer& operator=(PoolBuffer&& o) noexcept {
    std::swap(block_, o.block_);
    return *this;
  }
  ~PoolBuffer() { pool_release(block_); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(block_.data);
  }
  // Room for `bytes`, the first `kept` bytes kept.
  void grow(size_t bytes, size_t kept);

 private:
  PoolBlock block_;
};

// Bytes of free blocks the pool keeps for reuse.
size_t pool_cached_bytes();
// False in AddressSanitizer builds: every block then goes straight to malloc and free, so the
// sanitizer sees each use after free, and nothing is ever cached.
bool pool_caches();
// Returns every cached block to the system (tests, and before a phase with other shapes).
void pool_trim();

}  // namespace glm4
