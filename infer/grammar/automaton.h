// A grammar run as a lazily built deterministic automaton over bytes. A parser configuration is a
// set of stacks of grammar positions (a pushdown automaton, several stacks where alternatives
// are still open); each distinct set is interned as one state id and its transitions are
// memoised, so advancing by a byte already seen from a state is one table lookup.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "infer/grammar/grammar.h"

namespace glm4::grammar {

class Automaton {
 public:
  static constexpr int32_t kDead = -1;  // no text with this prefix matches

  explicit Automaton(std::shared_ptr<const Grammar> grammar);

  int32_t start() const { return start_; }
  // The state after `byte`, or kDead.
  int32_t step(int32_t state, uint8_t byte) {
    if (state < 0) return kDead;
    const Row* row = trans_[size_t(state)].get();
    if (row && (*row)[byte] != kUnknown) return (*row)[byte];
    return slow_step(state, byte);
  }
  int32_t step(int32_t state, std::string_view bytes);
  // The text so far is a complete match (the root rule is done).
  bool accepting(int32_t state) const { return state >= 0 && accepting_[size_t(state)]; }
  // The text so far can be continued (some stack still expects a byte).
  bool can_continue(int32_t state) const {
    return state >= 0 && states_[size_t(state)].size() > (accepting_[size_t(state)] ? 1u : 0u);
  }
  size_t state_count() const { return states_.size(); }
  const Grammar& grammar() const { return *grammar_; }

  // True if the whole of `text` matches.
  bool matches(std::string_view text) { return accepting(step(start_, text)); }

 private:
  static constexpr int32_t kUnknown = -2;
  static constexpr int32_t kAccept = -1;  // the empty stack, in a state's stack list
  using Row = std::array<int32_t, 256>;

  struct Node {  // one stack frame: where to resume, and the frame below
    int32_t pos, parent;
  };
  int32_t node(int32_t pos, int32_t parent);
  // Expands position `pos` over `parent` until every stack's top is a byte set; appends them.
  void close(int32_t pos, int32_t parent, std::vector<int32_t>& out, int depth);
  int32_t intern(std::vector<int32_t>& stacks);
  int32_t slow_step(int32_t state, uint8_t byte);

  std::shared_ptr<const Grammar> grammar_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<std::vector<int32_t>> states_;  // sorted stack tops (node ids; kAccept first)
  std::unordered_map<std::string, int32_t> state_ids_;
  std::vector<std::unique_ptr<Row>> trans_;
  std::vector<uint8_t> accepting_;
  int32_t start_ = kDead;
};

}  // namespace glm4::grammar
