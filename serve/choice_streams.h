// The server-sent events of one streamed request with n choices, in OpenAI's shape: every chunk
// names its choice (choices[0].index); each choice gets its role delta (chat), its content,
// reasoning and tool-call deltas, and one chunk with its finish_reason; the usage chunk
// (stream_options.include_usage) comes once, after every choice finished, with the totals.
// No HTTP here: the server polls the slots and writes what this returns.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "serve/openai_schema.h"

namespace glm4::serve {

class ChoiceStreams {
 public:
  ChoiceStreams(ResponseMeta meta, const ReplyReading& reading, size_t choices, bool want_logprobs,
                bool include_usage, const Tokenizer& tokenizer);

  // The first chunks: each chat choice's role, then a forced tool call's opening (its name).
  std::vector<json> open();
  // The chunks for choice `i`'s next event. A final event that failed ("error", or "cancelled"
  // by a shutdown) gives the error body and makes failed() true: the stream ends there.
  std::vector<json> push(size_t i, const SlotEvent& event);
  // After every choice finished (and none failed): the usage chunk when it was asked for.
  std::vector<json> close() const;

  bool finished(size_t i) const { return choices_[i].finished; }
  bool all_finished() const;
  bool failed() const { return failed_; }
  // For the request's log line: the prompt, every choice's tokens so far, choice 0's reason (or
  // the failure's).
  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t completion_tokens() const;
  std::string finish_reason() const;

 private:
  struct Choice {
    std::unique_ptr<ChatReply> reply;  // a chat reply read into deltas (reading.parse)
    int64_t tokens = 0;
    std::string finish_reason;
    bool finished = false;
  };
  std::vector<json> finish(size_t i, const SlotEvent& e, const std::vector<TokenLogprob>* lps);

  ResponseMeta meta_;
  const Tokenizer& tokenizer_;
  bool want_logprobs_, include_usage_;
  std::vector<Choice> choices_;
  int64_t prompt_tokens_ = 0;
  bool failed_ = false;
  std::string failure_;  // "error" or "cancelled"
};

}  // namespace glm4::serve
