// Batched generation: left-padded prompts share one KV cache of B rows and decode in lock step.
// Row b's padding is masked by kv_begin[b] and its positions start at 0 at its first real
// token, so each row computes what it would alone.
#include <algorithm>

#include "base/check.h"
#include "infer/cached_forward.h"
#include "infer/generator.h"

namespace glm4 {

std::vector<std::vector<int32_t>> generate_batch(const Glm4Model& model,
                                                 const std::vector<std::vector<int32_t>>& prompts,
                                                 const GenerationConfig& config) {
  validate_generation_config(config);
  const int64_t B = int64_t(prompts.size()), vocab = model.config.vocab_size;
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(B));
  if (B == 0) return out;
  int64_t L = 0;
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = prompts[size_t(b)];
    GLM4_CHECK(!p.empty(), "[generate_batch] prompt ", b, " is empty");
    for (size_t i = 0; i < p.size(); ++i)
      GLM4_CHECK(p[i] >= 0 && p[i] < vocab, "[generate_batch] prompt ", b, ": token ", p[i], " at index ", i,
                 " outside the vocabulary of ", vocab);
    L = std::max(L, int64_t(p.size()));
  }
  const int32_t pad_id = model.config.pad_token_id.value_or(0);
  // The window keeps every row's padding plus keep_first real tokens, so kv_begin stays valid.
  const int64_t keep_first = config.keep_first + L - int64_t(std::min_element(prompts.begin(), prompts.end(),
      [](const auto& a, const auto& b) { return a.size() < b.size(); })->size());
  GLM4_CHECK(config.max_kv_size == 0 || config.max_kv_size > keep_first, "[generate_batch] max_kv_size ",
             config.max_kv_size, " leaves no room after ", keep_first, " padding and kept tokens");

  KvCache cache = make_cache(model, B);
  ForwardContext ctx;
  ctx.batch = B;
  ctx.mask.kv_begin.resize(size_t(B));
  std::vector<std::vector<int32_t>> history(static_cast<size_t>(B));
  std::vector<int64_t> next_pos(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = prompts[size_t(b)];
    ctx.mask.kv_begin[size_t(b)] = int32_t(L - int64_t(p.size()));
    history[size_t(b)] = p;
    next_pos[size_t(b)] = int64_t(p.size());
  }

  // Prefill column chunks of the padded [B, L] block.
  int64_t chunk = config.prefill_chunk;
  if (config.max_kv_size > 0) chunk = std::min(chunk, config.max_kv_size - keep_first);
  std::vector<int32_t> ids;
  Tensor logits;  // [B, vocab]
  for (int64_t c0 = 0; c0 < L; c0 += chunk) {
    const int64_t T = std::min(chunk, L - c0);
    ids.assign(size_t(B * T), pad_id);
    ctx.seq = T;
    ctx.positions.assign(size_t(B * T), 0);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t pad = ctx.mask.kv_begin[size_t(b)];
      for (int64_t t = 0; t < T; ++t) {
        const int64_t col = c0 + t;
        if (col < pad) continue;
        ids[size_t(b * T + t)] = prompts[size_t(b)][size_t(col - pad)];
        ctx.positions[size_t(b * T + t)] = int32_t(col - pad);
      }
    }
    make_room(cache, T, config.max_kv_size, keep_first);
    logits = cached_forward(model, cache, ctx, ids, c0 + T == L);
  }

  std::vector<Sampler> samplers(size_t(B), Sampler(config.sampling));
  std::vector<bool> done(size_t(B), false);
  int64_t live = B;
  ids.assign(size_t(B), pad_id);
  ctx.seq = 1;
  ctx.positions.assign(size_t(B), 0);
  for (int step = 0; step < config.max_tokens && live > 0; ++step) {
    if (step > 0) {  // feed the tokens drawn at the previous step
      make_room(cache, 1, config.max_kv_size, keep_first);
      logits = cached_forward(model, cache, ctx, ids, true);
    }
    for (int64_t b = 0; b < B; ++b) {
      if (done[size_t(b)]) continue;
      std::span<const float> row(logits.data() + b * vocab, size_t(vocab));
      int32_t token = samplers[size_t(b)].sample(row, history[size_t(b)]);
      const auto& stops = config.stop_ids;
      if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
        done[size_t(b)] = true;
        --live;
        continue;  // the row keeps feeding its last token, whose results are ignored
      }
      out[size_t(b)].push_back(token);
      history[size_t(b)].push_back(token);
      ids[size_t(b)] = token;
      ctx.positions[size_t(b)] = int32_t(next_pos[size_t(b)]++);
    }
  }
  return out;
}

}  // namespace glm4
