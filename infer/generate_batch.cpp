// Batched generation: every prompt keeps its own KV cache; each forward pass feeds the next
// prompt chunk of every row still prefilling, then one token of every row still decoding.
#include <algorithm>

#include "base/check.h"
#include "infer/cached_forward.h"
#include "infer/generator.h"

namespace glm4 {

std::vector<std::vector<int32_t>> generate_batch(const Glm4Model& model,
                                                 const std::vector<std::vector<int32_t>>& prompts,
                                                 const GenerationConfig& config) {
  validate_generation_config(config);
  const size_t B = prompts.size();
  const int64_t vocab = model.config.vocab_size;
  for (size_t b = 0; b < B; ++b) {
    GLM4_CHECK(!prompts[b].empty(), "[generate_batch] prompt ", b, " is empty");
    for (size_t i = 0; i < prompts[b].size(); ++i)
      GLM4_CHECK(prompts[b][i] >= 0 && prompts[b][i] < vocab, "[generate_batch] prompt ", b,
                 ": token ", prompts[b][i], " at index ", i, " outside the vocabulary of ", vocab);
  }
  int64_t chunk = config.prefill_chunk;
  if (config.max_kv_size > 0) chunk = std::min(chunk, config.max_kv_size - config.keep_first);

  struct Row {
    KvCache cache;
    Sampler sampler;
    std::vector<int32_t> history;  // prompt, then the tokens drawn
    int64_t fed = 0;               // tokens of history in the cache (positions are absolute)
    std::vector<float> logits;     // [vocab] after the last token fed
    bool done = false;
  };
  std::vector<Row> rows;
  rows.reserve(B);
  for (size_t b = 0; b < B; ++b)
    rows.push_back({make_cache(model, config.kv_cache_dtype),
                    Sampler(config.sampling),
                    prompts[b],
                    0,
                    {},
                    false});
  std::vector<std::vector<int32_t>> out(B);

  // Feeds the unfed part of each listed row's history (at most `chunk` tokens each) in one pass.
  auto step = [&](const std::vector<size_t>& which) {
    std::vector<CachedRow> batch;
    for (size_t b : which) {
      Row& row = rows[b];
      const int64_t T = std::min<int64_t>(chunk, int64_t(row.history.size()) - row.fed);
      make_room(row.cache, T, config.max_kv_size, config.keep_first);
      batch.push_back({&row.cache,
                       std::span<const int32_t>(row.history).subspan(size_t(row.fed), size_t(T)),
                       row.fed});
    }
    Tensor logits = cached_forward(model, batch, true);  // [rows, vocab]
    for (size_t i = 0; i < which.size(); ++i) {
      Row& row = rows[which[i]];
      row.fed += int64_t(batch[i].tokens.size());
      row.logits.assign(logits.data() + int64_t(i) * vocab, logits.data() + int64_t(i + 1) * vocab);
      mask_undrawable(row.logits, config.drawable_ids);
    }
  };

  for (;;) {  // prefill
    std::vector<size_t> prefilling;
    for (size_t b = 0; b < B; ++b)
      if (rows[b].fed < int64_t(rows[b].history.size())) prefilling.push_back(b);
    if (prefilling.empty()) break;
    step(prefilling);
  }
  for (int drawn = 0; drawn < config.max_tokens; ++drawn) {
    std::vector<size_t> live;
    for (size_t b = 0; b < B; ++b)
      if (!rows[b].done) live.push_back(b);
    if (live.empty()) break;
    if (drawn > 0) step(live);  // feed the token each live row drew last
    for (size_t b : live) {
      Row& row = rows[b];
      const int32_t token = row.sampler.sample(row.logits, row.history);
      if (std::find(config.stop_ids.begin(), config.stop_ids.end(), token) !=
          config.stop_ids.end()) {
        row.done = true;
        continue;
      }
      out[b].push_back(token);
      row.history.push_back(token);
    }
  }
  return out;
}

}  // namespace glm4
