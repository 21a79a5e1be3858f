// A context-free grammar over bytes: rules of alternatives, each a sequence of byte sets and rule
// references. The JSON-schema compiler builds one; the automaton (automaton.h) runs it.
#pragma once
#include <bitset>
#include <cstdint>
#include <string_view>
#include <vector>

namespace glm4::grammar {

// A symbol of a sequence: >= 0 is a byte set (an index into Grammar::sets), <= -2 a reference to
// rule -sym - 2, and kEnd closes an alternative in Grammar::symbols.
using Sym = int32_t;
constexpr Sym kEnd = -1;
inline Sym rule_ref(int32_t rule) { return -rule - 2; }
inline int32_t rule_of(Sym s) { return -s - 2; }

using ByteSet = std::bitset<256>;

struct Grammar {
  std::vector<ByteSet> sets;
  std::vector<Sym> symbols;                  // every alternative, each closed by kEnd
  std::vector<std::vector<int32_t>> starts;  // [rule] -> positions in symbols of its alternatives
  int32_t root = 0;
};

class GrammarBuilder {
 public:
  int32_t new_rule();
  // Adds an alternative to `rule`; an empty sequence matches nothing (the empty string).
  void add(int32_t rule, std::vector<Sym> seq);
  Sym set(const ByteSet& bytes);
  Sym byte_range(uint8_t lo, uint8_t hi);
  std::vector<Sym> literal(std::string_view text);
  // A rule matching `seq` between min and max times in a row (max < 0: no upper bound).
  int32_t repeat(const std::vector<Sym>& seq, int min, int max);
  // Adds the rules of a built grammar (a compiled JSON schema, say): its rule r becomes rule
  // embed(g) + r here.
  int32_t embed(const Grammar& g);
  Grammar build(int32_t root) const;

 private:
  std::vector<ByteSet> sets_;
  std::vector<std::vector<std::vector<Sym>>> rules_;
};

// Concatenation helper: cat({a, b}, c, ...) for building sequences.
inline std::vector<Sym> cat(std::initializer_list<std::vector<Sym>> parts) {
  std::vector<Sym> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

}  // namespace glm4::grammar
