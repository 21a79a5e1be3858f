// The mask walk: pre-order over the trie, the automaton state of each node's prefix kept per
// depth; a dead state skips the node's subtree.
#include "infer/grammar/constraint.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace glm4::grammar {

namespace {
// Cached masks per constraint at most: 16 MB of bits (850 states of a 151k vocabulary), and at
// least 64 states for small vocabularies.
constexpr size_t kMaskCacheBytes = size_t(16) << 20;
}  // namespace

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> grammar,
                                     std::shared_ptr<const TokenTrie> trie,
                                     std::vector<int32_t> end_ids)
    : automaton_(std::move(grammar)), trie_(std::move(trie)), end_ids_(std::move(end_ids)) {
  GLM4_CHECK(trie_, "[grammar] no vocabulary trie");
  state_ = automaton_.start();
  walk_.resize(size_t(trie_->max_depth()) + 1);
}

bool GrammarConstraint::feed(std::string_view bytes) {
  const int32_t next = automaton_.step(state_, bytes);
  if (next == Automaton::kDead) return false;
  state_ = next;
  return true;
}

bool GrammarConstraint::is_end(int32_t id) const {
  return std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end();
}

void GrammarConstraint::compute(int32_t state, std::vector<uint64_t>& bits) {
  const TokenTrie& t = *trie_;
  bits.assign((size_t(t.vocab_size()) + 63) / 64, 0);
  walk_[0] = state;
  const size_t n = t.node_count();
  for (size_t i = 0; i < n;) {
    const int32_t d = t.depth(i);
    const int32_t s = automaton_.step(walk_[size_t(d - 1)], t.byte(i));
    if (s == Automaton::kDead) {
      i = t.subtree_end(i);
      continue;
    }
    walk_[size_t(d)] = s;
    for (auto [p, e] = t.tokens(i); p != e; ++p) bits[size_t(*p) >> 6] |= uint64_t(1) << (*p & 63);
    ++i;
  }
  for (int32_t id : end_ids_)  // an end token ends the reply: only when the value is complete
    if (id >= 0 && id < t.vocab_size()) bits[size_t(id) >> 6] &= ~(uint64_t(1) << (id & 63));
}

const std::vector<uint64_t>& GrammarConstraint::allowed() {
  auto it = masks_.find(state_);
  if (it != masks_.end()) return it->second;
  const size_t mask_bytes = (size_t(trie_->vocab_size()) + 63) / 64 * 8;
  if (masks_.size() >= std::max<size_t>(64, kMaskCacheBytes / mask_bytes)) masks_.clear();
  std::vector<uint64_t>& bits = masks_[state_];
  compute(state_, bits);
  return bits;
}

bool GrammarConstraint::allows(int32_t id) {
  if (is_end(id)) return complete();
  if (id < 0 || id >= trie_->vocab_size()) return false;
  return (allowed()[size_t(id) >> 6] >> (id & 63)) & 1;
}

void GrammarConstraint::mask(std::span<float> logits) {
  const std::vector<uint64_t>& bits = allowed();
  const bool end_ok = complete();
  end_logits_.clear();
  for (int32_t id : end_ids_)
    end_logits_.push_back(id >= 0 && size_t(id) < logits.size() ? logits[size_t(id)] : -INFINITY);
  const size_t vocab = std::min(logits.size(), size_t(trie_->vocab_size()));
  bool any = false;
  for (size_t w = 0; w * 64 < vocab; ++w) {
    const uint64_t word = bits[w];
    any = any || word != 0;
    if (word == ~uint64_t(0)) continue;
    const size_t end = std::min(vocab, w * 64 + 64);
    for (size_t i = w * 64; i < end; ++i)
      if (!((word >> (i & 63)) & 1)) logits[i] = -INFINITY;
  }
  for (size_t i = vocab; i < logits.size(); ++i) logits[i] = -INFINITY;
  for (size_t k = 0; k < end_ids_.size(); ++k)
    if (end_ids_[k] >= 0 && size_t(end_ids_[k]) < logits.size())
      logits[size_t(end_ids_[k])] = end_ok ? end_logits_[k] : -INFINITY;
  GLM4_CHECK(any || end_ok, "[grammar] no token of the vocabulary continues the constrained text");
}

void GrammarConstraint::accept(int32_t id) {
  GLM4_CHECK(allows(id), "[grammar] token ", id, " is not allowed here");
  if (is_end(id)) return;
  state_ = automaton_.step(state_, trie_->bytes(id));
}

}  // namespace glm4::grammar
