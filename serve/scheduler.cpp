// The slot loop: admit queued requests into free slots, drop cancelled ones, feed every live slot
// in one forward pass, draw a token for each slot whose input is all fed, free finished slots.
#include "serve/scheduler.h"

#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <numeric>

#include "autograd/node.h"
#include "autograd/storage_pool.h"
#include "base/check.h"
#include "infer/cached_forward.h"
#include "infer/grammar/constrained_draw.h"
#include "io/tokenizer/stream_decoder.h"
#include "model/kv_cache.h"
#include "serve/stop_text.h"

namespace glm4::serve {

bool SlotHandle::next(SlotEvent* out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  *out = std::move(events_.front());
  events_.pop_front();
  return true;
}

void SlotHandle::push(SlotEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
  }
  cv_.notify_all();
}

struct Scheduler::Slot {
  Slot(SlotRequest r, std::shared_ptr<SlotHandle> h, KvCache c)
      : request(std::move(r)),
        handle(std::move(h)),
        cache(std::move(c)),
        sampler(request.sampling),
        history(request.prompt),
        reply(request.strip_leading_newline),
        stop_text(request.stop) {}

  SlotRequest request;
  std::shared_ptr<SlotHandle> handle;
  KvCache cache;
  Sampler sampler;
  std::vector<int32_t> history;  // the prompt, then the tokens drawn
  int64_t fed = 0;               // tokens of history in the cache, = the next RoPE position
  int64_t budget = 0;            // tokens that may be drawn: max_tokens within the context
  int64_t drawn = 0;
  std::unique_ptr<StreamDecoder> decoder;
  ReplyText reply;  // before the stop strings: a stop "\n" does not match the dropped one
  StopText stop_text;
  std::unique_ptr<grammar::GrammarConstraint> constraint;  // response_format
  std::unique_ptr<grammar::CallWatch> calls;               // tool_choice auto
  std::vector<float> masked;                               // [vocab] logits under it
};

namespace {
constexpr auto kIdleTrim = std::chrono::seconds(1);

TokenLogprob logprob_of(const float* logits, int64_t vocab, int32_t token, int top) {
  const float peak = *std::max_element(logits, logits + vocab);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - peak);
  const double log_z = double(peak) + std::log(sum);
  TokenLogprob out{token, float(double(logits[token]) - log_z), {}};
  if (top <= 0) return out;
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  const size_t k = std::min<size_t>(size_t(top), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + long(k), ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (size_t i = 0; i < k; ++i) out.top.push_back({ids[i], float(double(logits[ids[i]]) - log_z)});
  return out;
}

SlotEvent final_event(const std::string& reason, int64_t prompt_tokens, int64_t completion_tokens) {
  SlotEvent e;
  e.done = true;
  e.finish_reason = reason;
  e.prompt_tokens = prompt_tokens;
  e.completion_tokens = completion_tokens;
  return e;
}
}  // namespace

Scheduler::Scheduler(const Glm4Model& model, const Tokenizer* tokenizer, SchedulerConfig config)
    : model_(model), tokenizer_(tokenizer), config_(config) {
  GLM4_CHECK(config_.max_batch > 0, "--max-batch must be positive, got ", config_.max_batch);
  GLM4_CHECK(config_.max_queue >= 0, "--max-queue must be >= 0, got ", config_.max_queue);
  GLM4_CHECK(config_.prefill_chunk > 0, "[serve] prefill_chunk must be positive, got ",
             config_.prefill_chunk);
  GLM4_CHECK(config_.max_kv_size == 0 || config_.max_kv_size > config_.keep_first, "--max-kv-size ",
             config_.max_kv_size, " must be 0 (unbounded) or more than ", config_.keep_first);
  if (config_.max_kv_size > 0)
    config_.prefill_chunk =
        std::min(config_.prefill_chunk, config_.max_kv_size - config_.keep_first);
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<SlotHandle> Scheduler::submit(SlotRequest request, Admission* admission) {
  auto handle = std::make_shared<SlotHandle>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (draining_ || stopping_) {
      *admission = Admission::Draining;
      return nullptr;
    }
    const int64_t free_slots = std::max<int64_t>(0, config_.max_batch - live_);
    if (int64_t(queue_.size()) >= config_.max_queue + free_slots) {
      *admission = Admission::QueueFull;
      return nullptr;
    }
    queue_.emplace_back(std::move(request), handle);
  }
  *admission = Admission::Accepted;
  cv_.notify_all();
  return handle;
}

void Scheduler::drain(std::chrono::milliseconds grace) {
  std::unique_lock<std::mutex> lock(mu_);
  draining_ = true;
  auto empty = [&] { return queue_.empty() && live_ == 0; };
  if (idle_.wait_for(lock, grace, empty)) return;
  cancel_all_ = true;
  cv_.notify_all();
  idle_.wait(lock, empty);
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {live_, int64_t(queue_.size()), steps_, rows_, draining_};
}

std::unique_ptr<Scheduler::Slot> Scheduler::open_slot(SlotRequest request,
                                                      std::shared_ptr<SlotHandle> handle) {
  auto slot = std::make_unique<Slot>(std::move(request), std::move(handle),
                                     make_cache(model_, config_.kv_cache_dtype));
  const SlotRequest& r = slot->request;
  const int64_t context = model_.config.max_position_embeddings;
  slot->budget =
      context > 0 ? std::min(r.max_tokens, context - int64_t(r.prompt.size())) : r.max_tokens;
  if (tokenizer_) slot->decoder = std::make_unique<StreamDecoder>(*tokenizer_, true);
  if (r.grammar)
    slot->constraint =
        std::make_unique<grammar::GrammarConstraint>(r.grammar, r.token_trie, r.stop_ids);
  if (r.call_grammar)
    slot->calls = std::make_unique<grammar::CallWatch>(r.call_grammar, r.token_trie, r.stop_ids,
                                                       r.call_opening);
  return slot;
}

void Scheduler::loop() {
  NoGradGuard no_grad;  // grad mode is per thread
  std::vector<std::unique_ptr<Slot>> live;
  bool trimmed = true;
  for (;;) {
    std::vector<std::pair<SlotRequest, std::shared_ptr<SlotHandle>>> refused;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto work = [&] { return stopping_ || cancel_all_ || !queue_.empty() || !live.empty(); };
      if (!cv_.wait_for(lock, kIdleTrim, work)) {
        // Idle for a while: hand the KV caches' and the batch's memory back to the system, so
        // a burst of requests does not leave the server at its peak size.
        if (!trimmed) {
          lock.unlock();
          pool_trim();
          malloc_trim(0);
          trimmed = true;
        }
        continue;
      }
      trimmed = false;
      if (stopping_ || cancel_all_) {
        for (auto& q : queue_) q.second->cancel();
        for (auto& s : live) s->handle->cancel();
      }
      while (int64_t(live.size()) < config_.max_batch && !queue_.empty()) {
        auto [request, handle] = std::move(queue_.front());
        queue_.pop_front();
        if (handle->cancelled()) {
          refused.emplace_back(std::move(request), std::move(handle));
          continue;
        }
        try {
          live.push_back(open_slot(std::move(request), handle));
        } catch (
            const std::exception& e) {  // out of memory, say: this request fails, the loop goes on
          SlotEvent event = final_event("error", 0, 0);
          event.error = e.what();
          handle->push(std::move(event));
        }
      }
      if (stopping_) {  // whatever is still queued (beyond free slots) is cancelled too
        for (auto& q : queue_) refused.push_back(std::move(q));
        queue_.clear();
      }
      live_ = int64_t(live.size());
    }
    for (auto& [request, handle] : refused)
      handle->push(final_event("cancelled", int64_t(request.prompt.size()), 0));
    std::erase_if(live, [](const std::unique_ptr<Slot>& s) {
      if (!s->handle->cancelled()) return false;
      s->handle->push(final_event("cancelled", int64_t(s->request.prompt.size()), s->drawn));
      return true;
    });
    const int64_t rows = int64_t(live.size());
    if (!live.empty()) step(live);
    std::lock_guard<std::mutex> lock(mu_);
    if (rows > 0) {
      ++steps_;
      rows_ += rows;
    }
    live_ = int64_t(live.size());
    if (live.empty() && queue_.empty()) {
      cancel_all_ = false;
      idle_.notify_all();
      if (stopping_) return;
    }
  }
}

void Scheduler::step(std::vector<std::unique_ptr<Slot>>& live) {
  const int64_t vocab = model_.config.vocab_size;
  std::vector<CachedRow> rows;
  std::vector<bool> finished(live.size(), false);
  Tensor logits;
  try {
    for (auto& s : live) {
      const int64_t T =
          std::min<int64_t>(config_.prefill_chunk, int64_t(s->history.size()) - s->fed);
      make_room(s->cache, T, config_.max_kv_size, config_.keep_first);
      rows.push_back({&s->cache,
                      std::span<const int32_t>(s->history).subspan(size_t(s->fed), size_t(T)),
                      s->fed, s->request.adapter});
    }
    logits = cached_forward(model_, rows, true);  // [rows, vocab]
  } catch (
      const std::exception& e) {  // the caches are in an unknown state: end every slot of the step
    std::fprintf(stderr, "glm4 serve: error in a batched step: %s\n", e.what());
    for (auto& s : live) fail(*s, e.what());
    live.clear();
    return;
  }
  for (size_t i = 0; i < live.size(); ++i) {
    Slot& s = *live[i];
    s.fed += int64_t(rows[i].tokens.size());
    if (s.fed < int64_t(s.history.size())) continue;
    try {  // an error drawing or decoding ends only its own request
      float* row = logits.data() + int64_t(i) * vocab;
      if (tokenizer_) mask_undrawable({row, size_t(vocab)}, tokenizer_->vocab_size());
      finished[i] = draw(s, row);
    } catch (const std::exception& e) {
      fail(s, e.what());
      finished[i] = true;
    }
  }
  size_t i = 0;
  std::erase_if(live, [&](const std::unique_ptr<Slot>&) { return finished[i++]; });
}

void Scheduler::fail(Slot& s, const std::string& why) {
  SlotEvent event = final_event("error", int64_t(s.request.prompt.size()), s.drawn);
  event.error = why;
  s.handle->push(std::move(event));
}

bool Scheduler::draw(Slot& s, const float* logits) {
  const SlotRequest& r = s.request;
  const int64_t vocab = model_.config.vocab_size;
  SlotEvent event;
  std::string reason;
  if (s.budget <= 0) {
    reason = "length";
  } else if (s.constraint && s.constraint->finished()) {  // the value is closed: nothing may follow
    reason = "stop";
  } else {
    const int32_t token = grammar::draw_constrained({logits, size_t(vocab)}, s.constraint.get(),
                                                    s.calls.get(), s.masked, s.sampler, s.history);
    ++s.drawn;
    if (std::find(r.stop_ids.begin(), r.stop_ids.end(), token) != r.stop_ids.end()) {
      reason = "stop";
    } else {
      s.history.push_back(token);
      event.ids.push_back(token);
      const std::vector<int32_t>& turns = r.call_opening.turn_ids;
      event.new_turn = s.calls && std::find(turns.begin(), turns.end(), token) != turns.end();
      if (r.top_logprobs >= 0)
        event.logprobs.push_back(logprob_of(logits, vocab, token, r.top_logprobs));
      if (s.decoder) event.text = s.stop_text.push(s.reply.push(s.decoder->push(token)));
      if (s.stop_text.stopped())
        reason = "stop";
      else if (s.drawn >= s.budget)
        reason = "length";
    }
  }
  if (reason.empty()) {
    s.handle->push(std::move(event));
    return false;
  }
  if (s.decoder && !s.stop_text.stopped()) {
    event.text += s.stop_text.push(s.reply.push(s.decoder->flush()));
    event.text += s.stop_text.flush();
  }
  event.done = true;
  event.finish_reason = reason;
  event.prompt_tokens = int64_t(r.prompt.size());
  event.completion_tokens = int64_t(s.history.size() - r.prompt.size());
  s.handle->push(std::move(event));
  return true;
}

}  // namespace glm4::serve
