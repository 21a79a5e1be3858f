// Continuous batching for the server (llama-server's slots): each request owns a slot with its KV
// cache, sampler, stop rules and token budget; one loop thread steps every live slot in ONE
// cached_forward per step (new slots feed a prompt chunk, the others one token), samples per
// slot, streams events out, and frees finished or cancelled slots between steps.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/dtype.h"
#include "infer/grammar/call_watch.h"
#include "infer/grammar/grammar.h"
#include "infer/grammar/token_trie.h"
#include "infer/sampler.h"
#include "io/tokenizer/chat_template.h"
#include "io/tokenizer/tokenizer.h"
#include "model/glm4_model.h"

namespace glm4::serve {

// One request as the scheduler runs it (validated by the schema layer).
struct SlotRequest {
  std::vector<int32_t> prompt;  // not empty, ids in the vocabulary
  int32_t adapter = -1;         // resident adapter slot (Linear::resident); -1 = the base
  int64_t max_tokens = 16;      // tokens drawn at most, a stop token included
  SamplerConfig sampling;
  std::vector<int32_t> stop_ids;  // a drawn stop id ends the reply and is not part of it
  std::vector<std::string> stop;  // stop strings on the decoded text; the match is cut off
  int top_logprobs = -1;          // -1: no logprobs; else alternatives per token (0..20)
  // A chat reply whose template ends the prompt with <|assistant|>: the "\n" the model writes
  // first is not part of the text (io/tokenizer/chat_template.h, ReplyText).
  bool strip_leading_newline = false;
  // response_format: every token drawn keeps the reply a prefix of this grammar's language, and
  // the stop ids are allowed only once it is complete (null: unconstrained). Both or neither.
  std::shared_ptr<const glm4::grammar::Grammar> grammar;
  std::shared_ptr<const glm4::grammar::TokenTrie> token_trie;
  // tool_choice auto: each call the model opens is constrained from its opening to its end by
  // this grammar (infer/grammar/call_watch.h; needs token_trie); null: calls are free text.
  std::shared_ptr<const glm4::grammar::Grammar> call_grammar;
  glm4::grammar::CallOpening call_opening;
};

struct TopLogprob {
  int32_t id;
  float logprob;
};

// The log-probability of a drawn token: log-softmax of the model's raw logits (before the
// repetition penalty, temperature and filters), as OpenAI and vLLM report it by default.
struct TokenLogprob {
  int32_t id;
  float logprob;
  std::vector<TopLogprob> top;  // the most likely tokens, most likely first
};

// What a request's consumer receives, in order: pieces of text, then one final event.
struct SlotEvent {
  std::string text;          // new text, never half a UTF-8 character
  std::vector<int32_t> ids;  // tokens drawn for this event (stop ids excluded)
  std::vector<TokenLogprob> logprobs;
  // The token drawn began a new <|assistant|> turn (a GLM-4 call after text, or a further call;
  // SlotRequest::call_opening.turn_ids): the text before it belongs to the turn it ended.
  bool new_turn = false;
  bool done = false;
  std::string finish_reason;  // on the final event: stop | length | cancelled | error
  std::string error;          // with finish_reason "error"
  int64_t prompt_tokens = 0, completion_tokens = 0;  // on the final event
};

// Shared by the loop and the thread that waits for the request's events.
class SlotHandle {
 public:
  // The next event, waiting at most `timeout`; false when none came.
  bool next(SlotEvent* out, std::chrono::milliseconds timeout);
  // Frees the slot at the next step (a client went away); a final "cancelled" event follows.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

 private:
  friend class Scheduler;
  void push(SlotEvent event);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SlotEvent> events_;
  std::atomic<bool> cancelled_{false};
};

struct SchedulerConfig {
  int64_t max_batch = 8;        // live slots, and rows of one forward, at most
  int64_t max_queue = 64;       // requests waiting for a slot at most; more are refused
  int64_t prefill_chunk = 256;  // prompt tokens a slot feeds per step
  int64_t max_kv_size = 0;      // 0 = unbounded; else each cache keeps a window (as generate)
  int64_t keep_first = 4;
  DType kv_cache_dtype = DType::F32;  // as GenerationConfig's
};

struct SchedulerStats {
  int64_t live = 0, queued = 0;  // slots now, requests waiting
  int64_t steps = 0, rows = 0;   // forward passes so far, and rows they held
  bool draining = false;
};

class Scheduler {
 public:
  // `tokenizer` may be null: events then carry ids only (no text, so `stop` strings never match).
  Scheduler(const Glm4Model& model, const Tokenizer* tokenizer, SchedulerConfig config);
  ~Scheduler();  // cancels everything and joins the loop

  enum class Admission { Accepted, QueueFull, Draining };
  // Queues a request; null with the reason when it is refused.
  std::shared_ptr<SlotHandle> submit(SlotRequest request, Admission* admission);
  // Refuses new requests from now on and waits until every queued and live one has finished,
  // or `grace` passed, after which the rest are cancelled. Returns once nothing is left.
  void drain(std::chrono::milliseconds grace);
  SchedulerStats stats() const;
  const SchedulerConfig& config() const { return config_; }

 private:
  struct Slot;
  void loop();
  void step(std::vector<std::unique_ptr<Slot>>& live);
  std::unique_ptr<Slot> open_slot(SlotRequest request, std::shared_ptr<SlotHandle> handle);
  bool draw(Slot& slot, const float* logits);     // true when the slot finished
  void fail(Slot& slot, const std::string& why);  // its final event, "error"

  const Glm4Model& model_;
  const Tokenizer* tokenizer_;
  SchedulerConfig config_;
  mutable std::mutex mu_;
  std::condition_variable cv_;    // work arrived, or stopping
  std::condition_variable idle_;  // nothing queued or live
  std::deque<std::pair<SlotRequest, std::shared_ptr<SlotHandle>>> queue_;
  int64_t live_ = 0, steps_ = 0, rows_ = 0;
  bool draining_ = false, stopping_ = false, cancel_all_ = false;
  std::thread thread_;
};

}  // namespace glm4::serve
