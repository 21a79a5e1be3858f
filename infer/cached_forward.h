// One inference forward pass placed after what the KV cache already holds, shared by the
// single-sequence generator and batched generation. Runs without a tape.
#pragma once
#include <cstdint>
#include <span>

#include "model/forward_context.h"
#include "model/glm4_model.h"
#include "model/kv_cache.h"

namespace glm4 {

// ids [B * T] with ctx.batch = B, ctx.seq = T, ctx.positions [B * T] (absolute RoPE positions)
// and ctx.mask.kv_begin (left padding) set by the caller. Reserves room in `cache`, appends
// every layer's keys/values at cache.length(), commits T tokens. Returns the logits of each
// row's last position [B, vocab] when `want_logits`, else an undefined tensor.
Tensor cached_forward(const Glm4Model& model, KvCache& cache, ForwardContext& ctx,
                      std::span<const int32_t> ids, bool want_logits);

// Before `incoming` tokens are added: when the cache would grow past `max_kv_size` (> 0),
// drops the middle so that keep_first + the most recent tokens remain, leaving exactly room
// for `incoming`. Requires incoming <= max_kv_size - keep_first.
void make_room(KvCache& cache, int64_t incoming, int64_t max_kv_size, int64_t keep_first);

// A new cache sized for `model` and `batch` rows.
KvCache make_cache(const Glm4Model& model, int64_t batch);

}  // namespace glm4
