// The caching allocator behind tensor storage: large blocks are reused by size class (or a cached
// block up to twice the request), the waste per new block is bounded, and trimming gives
// everything back.
#include <gtest/gtest.h>

#include <cstring>

#include "autograd/storage_pool.h"
#include "autograd/tensor.h"
#include "base/memory.h"

namespace glm4 {
namespace {

// Under AddressSanitizer the pool caches nothing (pool_caches() is false): a released block is
// freed at once. The caching tests check that contract there instead.
bool expect_uncached_when_pool_is_off(size_t bytes) {
  if (pool_caches()) return false;
  PoolBlock a = pool_allocate(bytes);
  EXPECT_GE(a.capacity, bytes);
  pool_release(a);
  EXPECT_EQ(pool_cached_bytes(), 0u);
  return true;
}

TEST(StoragePool, ReusesLargeBlocksOfTheSameClass) {
  pool_trim();
  if (expect_uncached_when_pool_is_off(3u << 20)) return;
  PoolBlock a = pool_allocate(3u << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data) % 64, 0u);
  EXPECT_GE(a.capacity, 3u << 20);
  std::memset(a.data, 1, 3u << 20);  // writable over its whole size
  void* first = a.data;
  pool_release(a);
  EXPECT_EQ(pool_cached_bytes(), a.capacity);
  PoolBlock b = pool_allocate((3u << 20) - 1000);  // same class: the same block comes back
  EXPECT_EQ(b.data, first);
  EXPECT_EQ(pool_cached_bytes(), 0u);
  PoolBlock c = pool_allocate(5u << 20);  // another class: a new block
  EXPECT_NE(c.data, first);
  pool_release(b);
  pool_release(c);
  EXPECT_EQ(pool_cached_bytes(), b.capacity + c.capacity);
  pool_trim();
  EXPECT_EQ(pool_cached_bytes(), 0u);
}

TEST(StoragePool, ACachedBlockUpToTwiceTheRequestServesIt) {
  pool_trim();
  if (expect_uncached_when_pool_is_off(8u << 20)) return;
  PoolBlock big = pool_allocate(8u << 20);
  void* first = big.data;
  pool_release(big);
  PoolBlock quarter = pool_allocate(2u << 20);  // 4x smaller: the cached block stays
  EXPECT_NE(quarter.data, first);
  EXPECT_EQ(pool_cached_bytes(), big.capacity);
  PoolBlock most = pool_allocate(5u << 20);  // 8 MB is within twice 5 MB: it is reused whole
  EXPECT_EQ(most.data, first);
  EXPECT_EQ(most.capacity, big.capacity);
  EXPECT_EQ(pool_cached_bytes(), 0u);
  std::memset(most.data, 1, most.capacity);
  pool_release(most);  // back under its own class
  PoolBlock again = pool_allocate(8u << 20);
  EXPECT_EQ(again.data, first);
  pool_release(again);
  pool_release(quarter);
  pool_trim();
}

TEST(StoragePool, SizeClassesWasteAtMostAnEighth) {
  for (size_t bytes : {kHugePageBytes, kHugePageBytes + 1, size_t(3000001), size_t(77) << 20}) {
    PoolBlock b = pool_allocate(bytes);
    EXPECT_GE(b.capacity, bytes);
    EXPECT_LE(double(b.capacity), double(bytes) * 1.125 + 4096) << bytes;
    pool_release(b);
  }
  // Blocks below a huge page go to the heap, never to the cache.
  for (size_t bytes : {size_t(100), size_t(1) << 20, kHugePageBytes - 64}) {
    PoolBlock small = pool_allocate(bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data) % 64, 0u);
    size_t cached = pool_cached_bytes();
    pool_release(small);
    EXPECT_EQ(pool_cached_bytes(), cached) << bytes;
  }
  pool_trim();
}

TEST(StoragePool, TensorsDrawFromIt) {
  pool_trim();
  if (expect_uncached_when_pool_is_off(size_t(4) << 20)) return;
  float* first;
  {
    Tensor t = Tensor::empty({1024, 1024});
    first = t.data();
  }
  EXPECT_GE(pool_cached_bytes(), size_t(4) << 20);
  Tensor again = Tensor::zeros({1024, 1024});
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(again.data()[12345], 0.0f);  // zeros() still zeroes a reused block
}

}  // namespace
}  // namespace glm4
