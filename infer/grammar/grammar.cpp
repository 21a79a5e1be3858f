// The grammar builder: byte sets are shared between symbols, alternatives are laid out one after
// another so that a parser position is a single index.
#include "infer/grammar/grammar.h"

#include "base/check.h"

namespace glm4::grammar {

int32_t GrammarBuilder::new_rule() {
  rules_.emplace_back();
  return int32_t(rules_.size() - 1);
}

void GrammarBuilder::add(int32_t rule, std::vector<Sym> seq) {
  GLM4_CHECK(rule >= 0 && size_t(rule) < rules_.size(), "[grammar] no rule ", rule);
  rules_[size_t(rule)].push_back(std::move(seq));
}

Sym GrammarBuilder::set(const ByteSet& bytes) {
  for (size_t i = 0; i < sets_.size(); ++i)
    if (sets_[i] == bytes) return Sym(i);
  sets_.push_back(bytes);
  return Sym(sets_.size() - 1);
}

Sym GrammarBuilder::byte_range(uint8_t lo, uint8_t hi) {
  ByteSet b;
  for (int c = lo; c <= hi; ++c) b.set(size_t(c));
  return set(b);
}

std::vector<Sym> GrammarBuilder::literal(std::string_view text) {
  std::vector<Sym> out;
  for (char c : text) out.push_back(byte_range(uint8_t(c), uint8_t(c)));
  return out;
}

int32_t GrammarBuilder::repeat(const std::vector<Sym>& seq, int min, int max) {
  GLM4_CHECK(min >= 0 && (max < 0 || max >= min), "[grammar] bad repeat bounds ", min, "..", max);
  // tail(k): k more optional copies (or any number when max < 0).
  int32_t tail = new_rule();
  add(tail, {});
  if (max < 0) {
    add(tail, cat({seq, {rule_ref(tail)}}));
  } else {
    for (int k = 1; k <= max - min; ++k) {
      const int32_t next = new_rule();
      add(next, {});
      add(next, cat({seq, {rule_ref(tail)}}));
      tail = next;
    }
  }
  std::vector<Sym> body;
  for (int i = 0; i < min; ++i) body.insert(body.end(), seq.begin(), seq.end());
  body.push_back(rule_ref(tail));
  const int32_t out = new_rule();
  add(out, body);
  return out;
}

int32_t GrammarBuilder::embed(const Grammar& g) {
  const int32_t base = int32_t(rules_.size());
  for (size_t r = 0; r < g.starts.size(); ++r) new_rule();
  for (size_t r = 0; r < g.starts.size(); ++r)
    for (int32_t pos : g.starts[r]) {
      std::vector<Sym> seq;
      for (size_t i = size_t(pos); g.symbols[i] != kEnd; ++i) {
        const Sym s = g.symbols[i];
        seq.push_back(s >= 0 ? set(g.sets[size_t(s)]) : rule_ref(base + rule_of(s)));
      }
      add(base + int32_t(r), std::move(seq));
    }
  return base;
}

Grammar GrammarBuilder::build(int32_t root) const {
  Grammar g;
  g.sets = sets_;
  g.root = root;
  g.starts.resize(rules_.size());
  for (size_t r = 0; r < rules_.size(); ++r) {
    GLM4_CHECK(!rules_[r].empty(), "[grammar] rule ", r, " has no alternative");
    for (const auto& alt : rules_[r]) {
      g.starts[r].push_back(int32_t(g.symbols.size()));
      for (Sym s : alt) {
        GLM4_CHECK(s >= 0 ? size_t(s) < sets_.size() : size_t(rule_of(s)) < rules_.size(),
                   "[grammar] rule ", r, " refers to an unknown symbol ", s);
        g.symbols.push_back(s);
      }
      g.symbols.push_back(kEnd);
    }
  }
  return g;
}

}  // namespace glm4::grammar
