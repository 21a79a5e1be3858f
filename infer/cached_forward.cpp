#include "infer/cached_forward.h"

#include "base/check.h"
#include "autograd/node.h"
#include "autograd/ops.h"

namespace glm4 {

Tensor cached_forward(const Glm4Model& model, KvCache& cache, ForwardContext& ctx,
                      std::span<const int32_t> ids, bool want_logits) {
  NoGradGuard no_grad;
  const int64_t B = ctx.batch, T = ctx.seq;
  GLM4_CHECK(B == cache.batch() && T > 0 && int64_t(ids.size()) == B * T,
             "[generate] forward of ", ids.size(), " ids as ", B, " x ", T, " on a cache of batch ", cache.batch());
  cache.reserve(T);
  ctx.cache = &cache;
  ctx.mask.causal = true;
  ctx.mask.q_offset = cache.length();
  Tensor hidden = model.forward_hidden(ids, ctx);  // [B, T, hidden]
  cache.commit(T);
  ctx.cache = nullptr;
  if (!want_logits) return Tensor();
  if (T > 1) hidden = ops::slice(hidden, 1, T - 1, T);  // [B, 1, hidden]: only the last row
  Tensor logits = model.logits(hidden, ctx);             // [B, 1, vocab]
  return logits.view_as_shape({B, model.config.vocab_size});
}

void make_room(KvCache& cache, int64_t incoming, int64_t max_kv_size, int64_t keep_first) {
  if (max_kv_size <= 0 || cache.length() + incoming <= max_kv_size) return;
  GLM4_CHECK(incoming <= max_kv_size - keep_first, "[generate] ", incoming,
             " tokens at once do not fit a KV window of ", max_kv_size, " keeping the first ", keep_first);
  cache.evict_middle(keep_first, max_kv_size - incoming - keep_first);
}

KvCache make_cache(const Glm4Model& model, int64_t batch) {
  const ModelConfig& c = model.config;
  return KvCache(c.num_hidden_layers, batch, c.num_key_value_heads, c.head_dim);
}

}  // namespace glm4
