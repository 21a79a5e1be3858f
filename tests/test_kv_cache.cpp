// The KV cache's bookkeeping (model/kv_cache.h) held in bf16 (--kv-cache bf16), for a keys-only
// cache (glm4_moe_lite's latent cache) and one of keys and values: what a layer's keys (and
// values) read back as after appends that grow it past a chunk, a window eviction and a
// truncation; their shapes and bytes; and the dtypes it refuses.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "base/check.h"
#include "base/dtype.h"
#include "model/kv_cache.h"

namespace glm4 {
namespace {

constexpr int64_t kWidth = 6;

// Token t's keys in layer l: values no bf16 holds exactly, so the rounding shows.
float key_value(int64_t l, int64_t t, int64_t i) {
  return 0.3f + 0.0013f * float(l + 3 * t) + 0.071f * float(i);
}

Tensor keys_of(int64_t l, int64_t first, int64_t count) {
  Tensor k = Tensor::empty({count, 1, kWidth});
  for (int64_t t = 0; t < count; ++t)
    for (int64_t i = 0; i < kWidth; ++i) k.data()[t * kWidth + i] = key_value(l, first + t, i);
  return k;
}

// Appends tokens [first, first + count) to both layers; returns layer 1's keys.
CachedTokens feed(KvCache& cache, int64_t first, int64_t count) {
  cache.begin(count);
  cache.append_keys(0, keys_of(0, first, count));
  const CachedTokens seen = cache.append_keys(1, keys_of(1, first, count));
  cache.commit();
  return seen;
}

// Layer 1's keys as read back equal the bf16 rounding of the tokens `tokens` in order.
void expect_tokens(const CachedTokens& seen, const std::vector<int64_t>& tokens) {
  ASSERT_EQ(seen.tokens, int64_t(tokens.size()));
  ASSERT_EQ(seen.width, kWidth);
  ASSERT_NE(seen.bf16, nullptr);
  const std::vector<float> wide = seen.to_f32().to_vector();
  for (size_t j = 0; j < tokens.size(); ++j) {
    int rounded = 0;
    for (int64_t i = 0; i < kWidth; ++i) {
      const float want = bf16_to_f32(f32_to_bf16(key_value(1, tokens[j], i)));
      EXPECT_EQ(bf16_to_f32(seen.bf16[j * kWidth + i]), want) << "token " << tokens[j];
      EXPECT_EQ(wide[j * kWidth + i], want) << "token " << tokens[j];
      rounded += want != key_value(1, tokens[j], i);
    }
    EXPECT_GT(rounded, 0) << "token " << tokens[j] << ": bf16 held every value exactly";
  }
}

TEST(KvCacheBf16, KeepsTheRoundedKeysThroughGrowthEvictionAndTruncation) {
  KvCache cache(2, 1, kWidth, 4, true, DType::BF16);  // chunks of 4 tokens
  EXPECT_EQ(cache.dtype(), DType::BF16);
  feed(cache, 0, 3);
  expect_tokens(feed(cache, 3, 4), {0, 1, 2, 3, 4, 5, 6});  // grown from 4 to 8
  EXPECT_EQ(cache.capacity(), 8);
  EXPECT_EQ(cache.bytes(), 2 * 8 * kWidth * 2);  // 2 layers, 2 bytes a value
  cache.evict_middle(2, 3);                      // keeps 0, 1 and 4, 5, 6
  expect_tokens(feed(cache, 7, 1), {0, 1, 4, 5, 6, 7});
  cache.truncate(4);
  expect_tokens(feed(cache, 8, 2), {0, 1, 4, 5, 8, 9});
}

// Keys and values of 2 kv heads of 3 values: each read back as the bf16 rounding of its own
// (values are keys + 10, so a mixed-up side shows), through growth, eviction and truncation.
TEST(KvCacheBf16, KeepsTheRoundedKeysAndValues) {
  constexpr int64_t kHeads = 2, kDim = kWidth / kHeads;
  KvCache cache(2, kHeads, kDim, 4, false, DType::BF16);
  auto feed_kv = [&](int64_t first, int64_t count) {
    cache.begin(count);
    std::pair<CachedTokens, CachedTokens> seen;
    for (int64_t l = 0; l < 2; ++l) {
      Tensor k = keys_of(l, first, count), v = keys_of(l, first, count);
      for (int64_t i = 0; i < v.numel(); ++i) v.data()[i] += 10.0f;
      seen = cache.append(l, ops::reshape(k, {count, kHeads, kDim}),
                          ops::reshape(v, {count, kHeads, kDim}));
    }
    cache.commit();
    return seen;
  };
  auto expect_kv = [&](const std::pair<CachedTokens, CachedTokens>& seen,
                       const std::vector<int64_t>& tokens) {
    const auto& [keys, values] = seen;
    EXPECT_EQ(keys.heads, kHeads);
    EXPECT_EQ(keys.to_f32().shape(), Shape({1, int64_t(tokens.size()), kHeads, kDim}));
    expect_tokens(keys, tokens);
    ASSERT_EQ(values.tokens, int64_t(tokens.size()));
    for (size_t j = 0; j < tokens.size(); ++j)
      for (int64_t i = 0; i < kWidth; ++i)
        EXPECT_EQ(bf16_to_f32(values.bf16[j * kWidth + i]),
                  bf16_to_f32(f32_to_bf16(key_value(1, tokens[j], i) + 10.0f)))
            << "token " << tokens[j];
  };
  feed_kv(0, 3);
  expect_kv(feed_kv(3, 4), {0, 1, 2, 3, 4, 5, 6});
  EXPECT_EQ(cache.bytes(), 2 * 2 * 8 * kWidth * 2);  // keys and values, 2 layers, 2 bytes a value
  cache.evict_middle(2, 3);
  expect_kv(feed_kv(7, 1), {0, 1, 4, 5, 6, 7});
  cache.truncate(4);
  expect_kv(feed_kv(8, 2), {0, 1, 4, 5, 8, 9});
}

TEST(KvCacheBf16, HoldsFp32OrBf16Only) {
  EXPECT_THROW(KvCache(2, 2, 8, 256, false, DType::F16), Error);
  EXPECT_THROW(KvCache(2, 1, 8, 256, true, DType::F16), Error);
  KvCache f32(2, 1, kWidth, 4, true);
  f32.begin(1);
  const CachedTokens seen = f32.append_keys(0, keys_of(0, 0, 1));
  EXPECT_EQ(seen.bf16, nullptr);
  EXPECT_EQ(seen.to_f32().data(), seen.f32.data());  // the cache's own storage, not a copy
  EXPECT_EQ(f32.bytes(), 2 * 4 * kWidth * 4);
}

}  // namespace
}  // namespace glm4
