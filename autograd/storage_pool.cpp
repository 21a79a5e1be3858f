#include "autograd/storage_pool.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "base/check.h"
#include "base/memory.h"

namespace glm4 {

namespace {

// Blocks below one huge page use aligned_alloc: the heap splits and merges its free chunks, where
// the pool would keep a block per size class. A MoE step's expert batches change size every
// step, and pooled from 256 KB up their many classes held about 80 MB more than the step's peak
// (moe-mid 1 x 512: 1,394 MB peak RSS against 1,335 with the heap taking them, the same speed).
constexpr size_t kPooledFrom = kHugePageBytes;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kPoolOn = false;  // AddressSanitizer must see every allocation and free
#else
constexpr bool kPoolOn = true;
#endif

// Size classes: 8 per power of two, so a block wastes at most 1/8 of its size.
size_t size_class(size_t bytes) {
  size_t top = size_t(1) << (63 - __builtin_clzll(bytes));  // largest power of two <= bytes
  size_t step = std::max<size_t>(top / 8, 4096);
  return (bytes + step - 1) / step * step;
}

struct Pool {
  std::mutex mu;
  std::map<size_t, std::vector<void*>> free_blocks;  // size class -> cached blocks
  size_t cached = 0;
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: tensors may die during static destruction
  return *p;
}

}  // namespace

PoolBlock pool_allocate(size_t bytes) {
  bytes = std::max<size_t>(bytes, 64);
  if (!kPoolOn || bytes < kPooledFrom) {
    size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) fail("out of memory allocating ", bytes, " bytes of tensor storage");
    return {p, rounded};
  }
  const size_t cls = size_class(bytes);
  {
    Pool& P = pool();
    std::lock_guard<std::mutex> lock(P.mu);
    // The smallest cached block of this class or above, if it is at most twice the request.
    auto it = P.free_blocks.lower_bound(cls);
    while (it != P.free_blocks.end() && it->second.empty()) ++it;
    if (it != P.free_blocks.end() && it->first <= 2 * cls) {
      void* p = it->second.back();
      it->second.pop_back();
      P.cached -= it->first;
      return {p, it->first};
    }
  }
  return {map_anonymous(cls, "tensor storage"), cls};  // 2 MB pages from 2 MB up
}

void pool_release(PoolBlock block) {
  if (!block.data) return;
  if (!kPoolOn || block.capacity < kPooledFrom) {
    std::free(block.data);
    return;
  }
  Pool& P = pool();
  std::lock_guard<std::mutex> lock(P.mu);
  P.free_blocks[block.capacity].push_back(block.data);
  P.cached += block.capacity;
}

bool pool_caches() { return kPoolOn; }

size_t pool_cached_bytes() {
  Pool& P = pool();
  std::lock_guard<std::mutex> lock(P.mu);
  return P.cached;
}

void pool_trim() {
  Pool& P = pool();
  std::lock_guard<std::mutex> lock(P.mu);
  for (auto& [cls, blocks] : P.free_blocks)
    for (void* p : blocks) unmap_anonymous(p, cls);
  P.free_blocks.clear();
  P.cached = 0;
}

void PoolBuffer::grow(size_t bytes, size_t kept) {
  PoolBlock grown = pool_allocate(bytes);
  if (kept > 0) std::memcpy(grown.data, block_.data, kept);
  pool_release(std::exchange(block_, grown));
}

}  // namespace glm4
