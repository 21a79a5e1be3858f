// The watch's two states: free text scanned for a call's opening, and a call under its grammar.
#include "infer/grammar/call_watch.h"

#include <algorithm>
#include <cmath>

namespace glm4::grammar {

CallWatch::CallWatch(std::shared_ptr<const Grammar> call, std::shared_ptr<const TokenTrie> trie,
                     std::vector<int32_t> end_ids, CallOpening opening)
    : call_(std::move(call), trie, end_ids),
      trie_(std::move(trie)),
      opening_(std::move(opening)),
      end_ids_(std::move(end_ids)),
      turn_start_(opening_.at_turn_start) {}

CallOpening call_opening(ChatFormat format, const Tokenizer& tokenizer) {
  CallOpening out;
  if (format == ChatFormat::Glm45 || format == ChatFormat::Glm47) out.opening = "<tool_call>";
  out.at_turn_start = calls_by_name_line(format);
  if (const auto assistant = tokenizer.special_id("<|assistant|>")) out.turn_ids = {*assistant};
  return out;
}

void CallWatch::reset() {
  in_call_ = false;
  turn_over_ = false;
  turn_start_ = opening_.at_turn_start;
  seen_.clear();
}

void CallWatch::mask(std::span<float> logits) {
  if (in_call_) call_.mask(logits);
  if (!turn_over_) return;
  std::vector<std::pair<size_t, float>> kept;
  for (const std::vector<int32_t>* ids : {&end_ids_, &opening_.turn_ids})
    for (int32_t id : *ids)
      if (id >= 0 && size_t(id) < logits.size()) kept.emplace_back(size_t(id), logits[size_t(id)]);
  std::fill(logits.begin(), logits.end(), -INFINITY);
  for (const auto& [id, logit] : kept) logits[id] = logit;
}

void CallWatch::open_with(std::string_view rest) {
  call_.reset();
  // Text after the opening in the same token: the call's first bytes. A token the grammar cannot
  // follow leaves the reply free (the parser reads it as text).
  in_call_ = call_.feed(rest);
  seen_.clear();
}

void CallWatch::accept(int32_t id) {
  const bool is_text = trie_->is_text(id);
  turn_over_ = false;
  if (in_call_) {
    call_.accept(id);
    if (call_.finished()) {
      in_call_ = false;
      turn_over_ = opening_.at_turn_start;
    }
    return;
  }
  if (std::find(opening_.turn_ids.begin(), opening_.turn_ids.end(), id) !=
      opening_.turn_ids.end()) {
    turn_start_ = opening_.at_turn_start;
    seen_.clear();
    return;
  }
  if (!is_text) return;
  const std::string& bytes = trie_->bytes(id);
  if (turn_start_) {
    turn_start_ = false;
    call_.reset();
    if (call_.allows(id)) {
      call_.accept(id);
      in_call_ = !call_.finished();
      turn_over_ = !in_call_;
      return;
    }
  }
  if (opening_.opening.empty()) return;
  seen_ += bytes;
  const size_t at = seen_.find(opening_.opening);
  if (at != std::string::npos) {
    open_with(std::string_view(seen_).substr(at + opening_.opening.size()));
    return;
  }
  const size_t keep = opening_.opening.size() - 1;
  if (seen_.size() > keep) seen_.erase(0, seen_.size() - keep);
}

}  // namespace glm4::grammar
