// Slot events of a streamed request's choices turned into OpenAI's stream chunks.
#include "serve/choice_streams.h"

namespace glm4::serve {

ChoiceStreams::ChoiceStreams(ResponseMeta meta, const ReplyReading& reading, size_t choices,
                             bool want_logprobs, bool include_usage, const Tokenizer& tokenizer)
    : meta_(std::move(meta)),
      tokenizer_(tokenizer),
      want_logprobs_(want_logprobs),
      include_usage_(include_usage),
      choices_(choices) {
  if (reading.parse)
    for (Choice& c : choices_) c.reply = std::make_unique<ChatReply>(reading);
}

std::vector<json> ChoiceStreams::open() {
  std::vector<json> out;
  if (meta_.endpoint != Endpoint::Chat) return out;
  for (size_t i = 0; i < choices_.size(); ++i) {
    out.push_back(stream_chunk(meta_, i, "", nullptr, "", nullptr, tokenizer_, true));
    if (choices_[i].reply)  // a forced call's opening: its name comes first
      if (const json d = choices_[i].reply->start(); !d.is_null())
        out.push_back(delta_chunk(meta_, i, d, nullptr, tokenizer_));
  }
  return out;
}

std::vector<json> ChoiceStreams::push(size_t i, const SlotEvent& e) {
  Choice& c = choices_[i];
  const std::vector<TokenLogprob>* lps =
      want_logprobs_ && !e.logprobs.empty() ? &e.logprobs : nullptr;
  if (e.done) return finish(i, e, lps);
  c.tokens += int64_t(e.ids.size());
  if (c.reply) {
    const json d = c.reply->push(e.text, e.new_turn);
    if (d.is_null() && !lps) return {};
    return {delta_chunk(meta_, i, d, lps, tokenizer_)};
  }
  if (e.text.empty() && !lps) return {};
  return {stream_chunk(meta_, i, e.text, lps, "", nullptr, tokenizer_)};
}

std::vector<json> ChoiceStreams::finish(size_t i, const SlotEvent& e,
                                        const std::vector<TokenLogprob>* lps) {
  Choice& c = choices_[i];
  prompt_tokens_ = e.prompt_tokens;
  c.tokens = e.completion_tokens;
  c.finished = true;
  c.finish_reason = e.finish_reason;
  if (e.finish_reason == "error" || e.finish_reason == "cancelled") {
    failed_ = true;
    if (failure_ != "error") failure_ = e.finish_reason;
    return {error_body(ApiError(500,
                                e.finish_reason == "error" ? "generation failed: " + e.error
                                                           : "the request was cancelled (shutdown)",
                                "", "internal_error", "server_error"))};
  }
  // One choice: its finish chunk carries the usage too. Several: only the totals, once, at the
  // end (close()), so no client mistakes one choice's count for the request's.
  const json u = choices_.size() == 1 ? usage(e.prompt_tokens, e.completion_tokens) : json();
  std::vector<json> out;
  if (c.reply) {
    json d = c.reply->push(e.text);
    if (!d.is_null() || lps) out.push_back(delta_chunk(meta_, i, d, lps, tokenizer_));
    d = c.reply->finish();
    if (!d.is_null()) out.push_back(delta_chunk(meta_, i, d, nullptr, tokenizer_));
    c.finish_reason = c.reply->finish_reason(e.finish_reason);
  } else if (!e.text.empty() || lps) {
    out.push_back(stream_chunk(meta_, i, e.text, lps, "", nullptr, tokenizer_));
  }
  out.push_back(stream_chunk(meta_, i, "", nullptr, c.finish_reason, u, tokenizer_));
  return out;
}

std::vector<json> ChoiceStreams::close() const {
  if (!include_usage_) return {};
  return {usage_chunk(meta_, prompt_tokens_, completion_tokens())};
}

bool ChoiceStreams::all_finished() const {
  for (const Choice& c : choices_)
    if (!c.finished) return false;
  return true;
}

int64_t ChoiceStreams::completion_tokens() const {
  int64_t n = 0;
  for (const Choice& c : choices_) n += c.tokens;
  return n;
}

std::string ChoiceStreams::finish_reason() const {
  return failed_ ? failure_ : choices_[0].finish_reason;
}

}  // namespace glm4::serve
