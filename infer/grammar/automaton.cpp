// Stacks are interned frames (position, parent), so a stack is one id and shared tails cost
// nothing; a reference in tail position replaces its frame instead of pushing one, so repetition
// written as right recursion runs in constant stack depth.
#include "infer/grammar/automaton.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"

namespace glm4::grammar {

namespace {
constexpr int kMaxExpansion = 4096;  // nested rule expansions without consuming a byte
}

Automaton::Automaton(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  GLM4_CHECK(grammar_ && size_t(grammar_->root) < grammar_->starts.size(),
             "[grammar] no root rule");
  std::vector<int32_t> stacks;
  for (int32_t p : grammar_->starts[size_t(grammar_->root)]) close(p, kAccept, stacks, 0);
  start_ = intern(stacks);
}

int32_t Automaton::node(int32_t pos, int32_t parent) {
  const uint64_t key = (uint64_t(uint32_t(pos)) << 32) | uint32_t(parent);
  auto [it, added] = node_ids_.try_emplace(key, int32_t(nodes_.size()));
  if (added) nodes_.push_back({pos, parent});
  return it->second;
}

void Automaton::close(int32_t pos, int32_t parent, std::vector<int32_t>& out, int depth) {
  GLM4_CHECK(depth < kMaxExpansion, "[grammar] rule expansion deeper than ", kMaxExpansion,
             " without consuming a byte (a left-recursive grammar?)");
  const Grammar& g = *grammar_;
  const Sym s = g.symbols[size_t(pos)];
  if (s == kEnd) {  // this alternative is done: resume the frame below
    if (parent == kAccept) {
      out.push_back(kAccept);
    } else {
      const Node n = nodes_[size_t(parent)];
      close(n.pos, n.parent, out, depth + 1);
    }
  } else if (s >= 0) {
    out.push_back(node(pos, parent));
  } else {
    const int32_t cont = g.symbols[size_t(pos) + 1] == kEnd ? parent : node(pos + 1, parent);
    for (int32_t start : g.starts[size_t(rule_of(s))]) close(start, cont, out, depth + 1);
  }
}

int32_t Automaton::intern(std::vector<int32_t>& stacks) {
  if (stacks.empty()) return kDead;
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  std::string key(stacks.size() * sizeof(int32_t), '\0');
  std::memcpy(key.data(), stacks.data(), key.size());
  auto [it, added] = state_ids_.try_emplace(std::move(key), int32_t(states_.size()));
  if (added) {
    states_.push_back(stacks);
    trans_.emplace_back();
    accepting_.push_back(stacks.front() == kAccept);
  }
  return it->second;
}

int32_t Automaton::slow_step(int32_t state, uint8_t byte) {
  const Grammar& g = *grammar_;
  std::vector<int32_t> next;
  for (int32_t top : states_[size_t(state)]) {
    if (top == kAccept) continue;
    const Node n = nodes_[size_t(top)];
    if (g.sets[size_t(g.symbols[size_t(n.pos)])].test(byte)) close(n.pos + 1, n.parent, next, 0);
  }
  const int32_t to = intern(next);  // may add states: index trans_ only after it
  auto& row = trans_[size_t(state)];
  if (!row) {
    row = std::make_unique<Row>();
    row->fill(kUnknown);
  }
  (*row)[byte] = to;
  return to;
}

int32_t Automaton::step(int32_t state, std::string_view bytes) {
  for (char c : bytes) state = step(state, uint8_t(c));
  return state;
}

}  // namespace glm4::grammar
