// The single-sequence generator: the token drawn by next() is fed to the cache lazily, at the
// following next() or append(), so the last token of a reply costs no forward pass.
#include "infer/generator.h"

#include <algorithm>
#include <chrono>

#include "base/check.h"
#include "infer/cached_forward.h"
#include "infer/grammar/constrained_draw.h"

namespace glm4 {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

void validate_generation_config(const GenerationConfig& c) {
  GLM4_CHECK(c.max_tokens >= 0, "[generate] max_tokens must be >= 0, got ", c.max_tokens);
  GLM4_CHECK(c.prefill_chunk > 0, "[generate] prefill_chunk must be > 0, got ", c.prefill_chunk);
  GLM4_CHECK(c.keep_first >= 0, "[generate] keep_first must be >= 0, got ", c.keep_first);
  GLM4_CHECK(c.max_kv_size == 0 || c.max_kv_size > c.keep_first, "[generate] max_kv_size ",
             c.max_kv_size, " must be 0 (unbounded) or more than keep_first (", c.keep_first, ")");
  GLM4_CHECK(c.drawable_ids >= 0, "[generate] drawable_ids must be >= 0, got ", c.drawable_ids);
}

Generator::Generator(const Glm4Model& model, GenerationConfig config)
    : model_(model),
      config_(std::move(config)),
      sampler_(config_.sampling),
      cache_(make_cache(model, config_.kv_cache_dtype)) {
  validate_generation_config(config_);
}

void Generator::start(std::span<const int32_t> prompt) {
  GLM4_CHECK(!prompt.empty(), "[generate] empty prompt");
  cache_.truncate(0);
  history_.clear();
  pending_.reset();
  position_ = 0;
  stats_ = Stats();
  sampler_ = Sampler(config_.sampling);
  if (constraint_) constraint_->reset();
  if (calls_) calls_->reset();
  started_ = false;
  auto t0 = std::chrono::steady_clock::now();
  feed(prompt);
  history_.assign(prompt.begin(), prompt.end());
  stats_.prompt_tokens += int64_t(prompt.size());
  stats_.prefill_seconds += seconds_since(t0);
  drawn_ = 0;
  done_ = false;
  stop_token_.reset();
}

void Generator::append(std::span<const int32_t> tokens) {
  GLM4_CHECK(started_, "[generate] append() before start()");
  feed_buf_.clear();
  if (pending_) feed_buf_.push_back(*pending_);
  feed_buf_.insert(feed_buf_.end(), tokens.begin(), tokens.end());
  if (!feed_buf_.empty()) {
    auto t0 = std::chrono::steady_clock::now();
    feed(feed_buf_);
    history_.insert(history_.end(), tokens.begin(), tokens.end());
    stats_.prompt_tokens += int64_t(tokens.size());
    stats_.prefill_seconds += seconds_since(t0);
  }
  pending_.reset();
  drawn_ = 0;
  done_ = false;
  stop_token_.reset();
  if (constraint_) constraint_->reset();
  if (calls_) calls_->reset();
}

std::optional<int32_t> Generator::next() {
  GLM4_CHECK(started_, "[generate] next() before start()");
  if (done_ || drawn_ >= config_.max_tokens || (constraint_ && constraint_->finished())) {
    done_ = true;
    return std::nullopt;
  }
  auto t0 = std::chrono::steady_clock::now();
  if (pending_) {
    int32_t token = *pending_;
    feed({&token, 1});
    pending_.reset();
  }
  const int32_t token = grammar::draw_constrained(logits_, constraint_.get(), calls_.get(), masked_,
                                                  sampler_, history_);
  ++drawn_;
  stats_.decode_seconds += seconds_since(t0);
  if (std::find(config_.stop_ids.begin(), config_.stop_ids.end(), token) !=
      config_.stop_ids.end()) {
    done_ = true;
    stop_token_ = token;
    return std::nullopt;
  }
  history_.push_back(token);
  pending_ = token;
  ++stats_.generated_tokens;
  return token;
}

void Generator::feed(std::span<const int32_t> tokens) {
  const int64_t vocab = model_.config.vocab_size, n = int64_t(tokens.size());
  for (int64_t i = 0; i < n; ++i)
    GLM4_CHECK(tokens[i] >= 0 && tokens[i] < vocab, "[generate] token ", tokens[i], " at index ", i,
               " outside the vocabulary of ", vocab);
  int64_t chunk = config_.prefill_chunk;
  if (config_.max_kv_size > 0) chunk = std::min(chunk, config_.max_kv_size - config_.keep_first);
  started_ = false;  // stays false if a forward pass throws: the cache is then unknown
  Tensor logits;
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t T = std::min(chunk, n - begin);
    make_room(cache_, T, config_.max_kv_size, config_.keep_first);
    CachedRow row{&cache_, tokens.subspan(size_t(begin), size_t(T)), position_};
    logits = cached_forward(model_, {&row, 1}, begin + T == n);
    position_ += T;
  }
  logits_.assign(logits.data(), logits.data() + vocab);
  mask_undrawable(logits_, config_.drawable_ids);
  started_ = true;
}

}  // namespace glm4
