// tool_choice "auto": the model may answer or call, so nothing is constrained until it opens a
// call; from there to the call's end its tokens are masked by the call grammar
// (tool_call.h, the name free), then decoding is free again and watches for the next call.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "infer/grammar/constraint.h"
#include "io/tokenizer/chat_template.h"

namespace glm4::grammar {

// How a reply opens a call: `opening` is text the model writes before a call's name (GLM-4.5's
// "<tool_call>"), or empty; with `at_turn_start`, a turn's first token begins a call when the call
// grammar allows it (GLM-4: a call is a turn that starts with the function's name, an answer one
// that starts with "\n"), and the call is the whole turn: after it only an end id or a turn id
// may come. A turn starts with the reply and after each of `turn_ids` (<|assistant|>).
struct CallOpening {
  std::string opening;
  bool at_turn_start = false;
  std::vector<int32_t> turn_ids;
};

// How `format`'s replies open a call: the GLM-4.5 family's with "<tool_call>", GLM-4's with a
// turn's first token (after the prompt's or a written <|assistant|>).
CallOpening call_opening(ChatFormat format, const Tokenizer& tokenizer);

class CallWatch {
 public:
  // `end_ids`: the reply's end tokens (allowed inside a call only where the call may end).
  CallWatch(std::shared_ptr<const Grammar> call, std::shared_ptr<const TokenTrie> trie,
            std::vector<int32_t> end_ids, CallOpening opening);

  bool in_call() const { return in_call_; }
  bool masking() const { return in_call_ || turn_over_; }  // mask() changes logits now
  // A new reply: free, at a turn's start.
  void reset();
  // Inside a call (or right after a GLM-4 call), sets every disallowed logit to -inf; outside,
  // leaves the logits alone.
  void mask(std::span<float> logits);
  // After each drawn token (a masked one inside a call).
  void accept(int32_t id);

 private:
  void open_with(std::string_view rest);

  GrammarConstraint call_;
  std::shared_ptr<const TokenTrie> trie_;
  CallOpening opening_;
  std::vector<int32_t> end_ids_;
  bool in_call_ = false;
  bool turn_over_ = false;  // a GLM-4 call just ended its turn
  bool turn_start_;
  std::string seen_;  // text since the last call, up to the opening's length
};

}  // namespace glm4::grammar
