// Constrained decoding for one sequence: the tokens allowed next are those whose bytes keep the
// text a prefix of the grammar's language, found by walking the vocabulary trie with the grammar
// automaton (a rejected prefix prunes its whole subtree); masks are cached per automaton state,
// and the state advances by the drawn token's bytes only. End tokens are allowed only when the
// text is complete.
//
// Use: mask(logits) before sampling, accept(token) after. To constrain part of a reply (tool-call
// arguments, say), create the constraint when that part begins, or reset() it there, and feed()
// any bytes of it written without the constraint; state() / set_state() save and restore the
// position.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "infer/grammar/automaton.h"
#include "infer/grammar/token_trie.h"

namespace glm4::grammar {

class GrammarConstraint {
 public:
  // `end_ids`: the tokens that end the reply (EOS, the chat template's role tokens).
  GrammarConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie,
                    std::vector<int32_t> end_ids);

  void reset() { state_ = automaton_.start(); }
  // Advances by text generated outside the constraint; false (and no change) if it leaves the
  // grammar.
  bool feed(std::string_view bytes);
  int32_t state() const { return state_; }
  void set_state(int32_t state) { state_ = state; }
  bool complete() const { return automaton_.accepting(state_); }
  // Complete, and nothing may follow (a closed object): the reply is over even without an end id.
  bool finished() const { return complete() && !automaton_.can_continue(state_); }

  // Sets every disallowed logit to -inf (ids past the tokenizer's vocabulary too). Throws
  // glm4::Error when no token is allowed.
  void mask(std::span<float> logits);
  bool allows(int32_t id);
  // Advances by a drawn token; throws glm4::Error for a token the mask did not allow.
  void accept(int32_t id);

  // The allowed tokens of the current state as bits (id i is bit i % 64 of word i / 64).
  const std::vector<uint64_t>& allowed();
  Automaton& automaton() { return automaton_; }

 private:
  bool is_end(int32_t id) const;
  void compute(int32_t state, std::vector<uint64_t>& bits);

  Automaton automaton_;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<int32_t> end_ids_;
  int32_t state_;
  std::unordered_map<int32_t, std::vector<uint64_t>> masks_;  // by automaton state
  std::vector<int32_t> walk_;                                 // [depth] states of the walk
  std::vector<float> end_logits_;
};

}  // namespace glm4::grammar
