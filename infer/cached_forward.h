// One inference forward over rows that continue their own KV caches: prompt chunks and decode
// tokens of different sequences in the same pass (the linears see every row's tokens at once,
// attention runs per row on its cache). Shared by the generator, batched generation and the
// server. Runs without a tape.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "model/glm4_model.h"
#include "model/kv_cache.h"

namespace glm4 {

struct CachedRow {
  KvCache* cache = nullptr;
  std::span<const int32_t> tokens;  // fed after what the cache holds; not empty
  int64_t first_position = 0;       // RoPE position of tokens[0]; the rest follow one by one
  int32_t adapter = -1;  // resident adapter slot for these tokens (Linear::resident); -1 = none
};

// Feeds every row; each cache grows by its row's tokens. Returns the logits of each row's last
// token [R, vocab] when `want_logits`, else an undefined tensor. Throws naming the row and index
// of a token outside the vocabulary, before any cache changes.
Tensor cached_forward(const Glm4Model& model, std::span<const CachedRow> rows, bool want_logits);

// Before `incoming` tokens are added: when the cache would grow past `max_kv_size` (> 0),
// drops the middle so that keep_first + the most recent tokens remain, leaving exactly room
// for `incoming`. Requires incoming <= max_kv_size - keep_first.
void make_room(KvCache& cache, int64_t incoming, int64_t max_kv_size, int64_t keep_first);

// An empty cache shaped for `model`, holding fp32 or bf16.
KvCache make_cache(const Glm4Model& model, DType dtype = DType::F32);

// The spelling of --kv-cache: "f32", "bf16"; and back (false for anything else).
const char* kv_cache_name(DType dtype);
bool parse_kv_cache_name(std::string_view name, DType* dtype);

// Values a token keeps per layer in that cache: keys and values of every kv head, or for latent
// attention (glm4_moe_lite) the latent and the shared rotary key (576 for GLM-4.7-Flash).
int64_t cache_values_per_token_layer(const ModelConfig& c);

}  // namespace glm4
