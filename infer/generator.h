// Token-level generation with a KV cache: chunked prefill, one token per next(), multi-turn
// continuation without recomputing earlier turns, an optional sliding KV window, and batched
// generation of several prompts together (each with its own cache).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "infer/grammar/call_watch.h"
#include "infer/grammar/constraint.h"
#include "infer/sampler.h"
#include "model/glm4_model.h"
#include "model/kv_cache.h"

namespace glm4 {

struct GenerationConfig {
  int max_tokens = 256;  // tokens generated per start()/append(), stop token included
  SamplerConfig sampling;
  std::vector<int32_t> stop_ids;
  // 0 = unbounded; else the cache keeps a window: the first keep_first tokens and the most
  // recent ones. RoPE positions stay absolute across evictions.
  int64_t max_kv_size = 0;
  int64_t keep_first = 4;
  int64_t prefill_chunk = 512;  // prompt tokens per forward pass
  // What the cache holds: F32, or BF16 (half its memory and the bytes a decode step reads).
  DType kv_cache_dtype = DType::F32;
  // 0 = every id may be drawn; else only ids below it: the tokenizer's vocabulary, where the
  // model's embedding is padded past it (GLM-4: 151552 rows, 151343 tokens).
  int64_t drawable_ids = 0;
};

struct GenerationStats {
  int64_t prompt_tokens = 0;  // tokens fed by start() and append()
  double prefill_seconds = 0;
  int64_t generated_tokens = 0;  // tokens returned by next()
  double decode_seconds = 0;
  double prefill_tokens_per_second() const {
    return prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0;
  }
  double decode_tokens_per_second() const {
    return decode_seconds > 0 ? generated_tokens / decode_seconds : 0;
  }
};

// Throws glm4::Error naming the first invalid field.
void validate_generation_config(const GenerationConfig& config);

class Generator {
 public:
  using Stats = GenerationStats;

  // `model` must outlive the generator.
  Generator(const Glm4Model& model, GenerationConfig config);

  // Forgets any earlier context (and re-seeds the sampler), prefills `prompt` (non-empty) in
  // chunks of prefill_chunk.
  void start(std::span<const int32_t> prompt);
  // The next token, or std::nullopt once a stop id was drawn (it is neither returned nor fed
  // to the cache; see stop_token()) or max_tokens were drawn since the last start()/append().
  std::optional<int32_t> next();
  // Continues the context (a multi-turn chat): feeds the last returned token and `tokens` after
  // what the cache holds, without recomputing earlier turns, and re-arms next().
  void append(std::span<const int32_t> tokens);
  // Constrains every token drawn from now on to `constraint` (null: no constraint): its mask is
  // applied to the logits before sampling (greedy or not) and the drawn token advances it.
  // start() and append() reset it to its start, so each reply is one value of its grammar; its
  // end ids should be this generator's stop_ids. A finished constraint (nothing may follow) ends
  // the reply as a stop id would, with no stop_token().
  void set_constraint(std::shared_ptr<grammar::GrammarConstraint> constraint) {
    constraint_ = std::move(constraint);
  }
  // With tools and no forced call: each call the model opens is masked by the watch's call
  // grammar until it ends (infer/grammar/call_watch.h); start() and append() reset it.
  void set_call_watch(std::shared_ptr<grammar::CallWatch> calls) { calls_ = std::move(calls); }

  // The logits [vocab] the most recent token was drawn from; right after start()/append(), the
  // logits of the last position fed.
  const std::vector<float>& last_logits() const { return logits_; }
  std::optional<int32_t> stop_token() const { return stop_token_; }
  // Every token of the context, oldest first: prompts, returned tokens, appended tokens.
  const std::vector<int32_t>& history() const { return history_; }
  int64_t cache_length() const { return cache_.length(); }
  int64_t next_position() const { return position_; }
  Stats stats() const { return stats_; }
  const KvCache& cache() const { return cache_; }
  const GenerationConfig& config() const { return config_; }

 private:
  void feed(std::span<const int32_t> tokens);  // prefill or decode step; updates logits_

  const Glm4Model& model_;
  GenerationConfig config_;
  Sampler sampler_;
  std::shared_ptr<grammar::GrammarConstraint> constraint_;
  std::shared_ptr<grammar::CallWatch> calls_;
  std::vector<float> masked_;  // [vocab] logits under the constraint
  KvCache cache_;
  std::vector<float> logits_;  // [vocab]
  std::vector<int32_t> history_;
  std::vector<int32_t> feed_buf_;   // pending token + appended tokens
  std::optional<int32_t> pending_;  // returned by next() but not yet in the cache
  std::optional<int32_t> stop_token_;
  int64_t position_ = 0;  // absolute position of the next token fed
  int drawn_ = 0;         // tokens drawn since the last start()/append()
  bool started_ = false, done_ = true;
  Stats stats_;
};

// Generates a continuation of every prompt at once: each prompt has its own KV cache; prompt
// chunks and then decode steps of all rows that are still going run in one forward pass (see
// cached_forward), and each row stops on its own. Every row computes what Generator computes for
// that prompt alone, and samples with its own Sampler seeded with config.sampling.seed. Returns
// the generated tokens of each row (stop tokens excluded).
std::vector<std::vector<int32_t>> generate_batch(const Glm4Model& model,
                                                 const std::vector<std::vector<int32_t>>& prompts,
                                                 const GenerationConfig& config);

}  // namespace glm4
