#include "infer/cached_forward.h"

#include <cstring>
#include <limits>

#include "autograd/node.h"
#include "base/check.h"

namespace glm4 {

Tensor cached_forward(const Glm4Model& model, std::span<const CachedRow> rows, bool want_logits) {
  NoGradGuard no_grad;
  GLM4_CHECK(!rows.empty(), "[generate] a forward pass with no rows");
  const int64_t vocab = model.config.vocab_size, R = int64_t(rows.size());
  CachedRows cached;
  ForwardContext ctx;
  AdapterRows adapters;
  bool any_adapter = false;
  std::vector<int32_t> ids;
  cached.offsets.push_back(0);
  for (int64_t r = 0; r < R; ++r) {
    const CachedRow& row = rows[size_t(r)];
    GLM4_CHECK(row.cache && !row.tokens.empty(), "[generate] row ", r,
               " has no cache or no tokens");
    GLM4_CHECK(row.first_position >= 0 && row.first_position + int64_t(row.tokens.size()) <=
                                              std::numeric_limits<int32_t>::max(),
               "[generate] row ", r, ": position ", row.first_position, " out of range");
    for (size_t i = 0; i < row.tokens.size(); ++i) {
      GLM4_CHECK(row.tokens[i] >= 0 && row.tokens[i] < vocab, "[generate] row ", r, ": token ",
                 row.tokens[i], " at index ", i, " outside the vocabulary of ", vocab);
      ids.push_back(row.tokens[i]);
      ctx.positions.push_back(int32_t(row.first_position + int64_t(i)));
    }
    cached.offsets.push_back(int64_t(ids.size()));
    GLM4_CHECK(row.adapter >= -1, "[generate] row ", r, ": adapter slot ", row.adapter);
    adapters.slots.push_back(row.adapter);
    any_adapter = any_adapter || row.adapter >= 0;
    for (KvCache* seen : cached.caches)
      GLM4_CHECK(seen != row.cache, "[generate] row ", r, " shares a cache");
    cached.caches.push_back(row.cache);
  }
  ctx.batch = 1;
  ctx.seq = int64_t(ids.size());
  if (any_adapter) {
    adapters.offsets = cached.offsets;
    ctx.adapter_rows = &adapters;
  }
  for (int64_t r = 0; r < R; ++r)
    rows[size_t(r)].cache->begin(int64_t(rows[size_t(r)].tokens.size()));
  Tensor hidden = model.forward_hidden(ids, ctx, &cached);  // [1, N, hidden]
  for (KvCache* cache : cached.caches) cache->commit();
  if (!want_logits) return Tensor();
  const int64_t H = model.config.hidden_size;
  Tensor last = Tensor::empty({R, H});  // each row's last position
  for (int64_t r = 0; r < R; ++r)
    std::memcpy(last.data() + r * H, hidden.data() + (cached.offsets[size_t(r) + 1] - 1) * H,
                size_t(H) * sizeof(float));
  return model.logits(last, ctx);  // [R, vocab]
}

void make_room(KvCache& cache, int64_t incoming, int64_t max_kv_size, int64_t keep_first) {
  if (max_kv_size <= 0 || cache.length() + incoming <= max_kv_size) return;
  GLM4_CHECK(incoming <= max_kv_size - keep_first, "[generate] ", incoming,
             " tokens at once do not fit a KV window of ", max_kv_size, " keeping the first ",
             keep_first);
  cache.evict_middle(keep_first, max_kv_size - incoming - keep_first);
}

int64_t cache_values_per_token_layer(const ModelConfig& c) {
  if (has_latent_attention(c)) return c.kv_lora_rank + c.qk_rope_head_dim;
  return 2 * c.num_key_value_heads * c.head_dim;
}

const char* kv_cache_name(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "f32";
    case DType::BF16:
      return "bf16";
    case DType::F16:
      return "f16";
  }
  return "?";
}

bool parse_kv_cache_name(std::string_view name, DType* dtype) {
  for (const DType d : {DType::F32, DType::BF16})
    if (name == kv_cache_name(d)) {
      *dtype = d;
      return true;
    }
  return false;
}

KvCache make_cache(const Glm4Model& model, DType dtype) {
  const ModelConfig& c = model.config;
  if (has_latent_attention(c))  // the latent and the shared rotary key, one "head" a token
    return KvCache(c.num_hidden_layers, 1, c.kv_lora_rank + c.qk_rope_head_dim, 256, true, dtype);
  return KvCache(c.num_hidden_layers, c.num_key_value_heads, c.head_dim, 256, false, dtype);
}

}  // namespace glm4
