// Byte-level BPE merging with a min-heap over candidate pairs: O(n log n) per piece, so long pieces
// (runs of spaces, long words without spaces) stay fast.
#include "io/tokenizer/byte_bpe.h"

#include <algorithm>
#include <queue>

#include "base/check.h"

namespace glm4 {

size_t PairTable::slot_of(uint64_t key) const {
  return size_t((key * 0x9E3779B97F4A7C15ull) >> 17) & (slots_.size() - 1);
}

void PairTable::reserve(size_t n) {
  size_t slots = 1024;
  while (slots < 2 * n) slots *= 2;
  if (slots > slots_.size()) rehash(slots);
}

void PairTable::rehash(size_t slots) {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(slots, Slot{kEmpty, {0, 0}});
  for (const Slot& s : old) {
    if (s.key == kEmpty) continue;
    size_t i = slot_of(s.key);
    while (slots_[i].key != kEmpty) i = (i + 1) & (slots_.size() - 1);
    slots_[i] = s;
  }
}

bool PairTable::insert(int32_t left, int32_t right, Merge m) {
  if ((count_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 1024 : slots_.size() * 2);
  const uint64_t key = (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  size_t i = slot_of(key);
  while (slots_[i].key != kEmpty) {
    if (slots_[i].key == key) return false;
    i = (i + 1) & (slots_.size() - 1);
  }
  slots_[i] = Slot{key, m};
  ++count_;
  return true;
}

const PairTable::Merge* PairTable::find(int32_t left, int32_t right) const {
  if (slots_.empty()) return nullptr;
  const uint64_t key = (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  for (size_t i = slot_of(key);; i = (i + 1) & (slots_.size() - 1)) {
    if (slots_[i].key == key) return &slots_[i].value;
    if (slots_[i].key == kEmpty) return nullptr;
  }
}

ByteBpe::ByteBpe(std::vector<std::optional<std::string>> tokens, const std::string& source)
    : tokens_(std::move(tokens)) {
  ids_.reserve(tokens_.size());
  for (size_t id = 0; id < tokens_.size(); ++id) {
    if (!tokens_[id]) continue;
    GLM4_CHECK(!tokens_[id]->empty(), source, ": token id ", id, " has no bytes");
    const bool fresh = ids_.emplace(*tokens_[id], int32_t(id)).second;
    GLM4_CHECK(fresh, source, ": token id ", id, " repeats the bytes of token id ",
               ids_.find(*tokens_[id])->second);
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = ids_.find(std::string(1, char(b)));
    GLM4_CHECK(it != ids_.end(), source, ": no token for the single byte 0x", std::hex, b,
               " (byte-level BPE needs all 256)");
    byte_ids_[b] = it->second;
  }
}

void ByteBpe::derive_merges_from_ranks() {
  pairs_.reserve(2 * tokens_.size());
  for (size_t id = 0; id < tokens_.size(); ++id) {
    if (!tokens_[id]) continue;
    const std::string_view t = *tokens_[id];
    for (size_t k = 1; k < t.size(); ++k) {
      const auto l = find(t.substr(0, k));
      if (!l) continue;
      const auto r = find(t.substr(k));
      if (r) pairs_.insert(*l, *r, {int32_t(id), int32_t(id)});
    }
  }
}

std::optional<int32_t> ByteBpe::find(std::string_view bytes) const {
  const auto it = ids_.find(bytes);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

void ByteBpe::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  const size_t n = piece.size();
  if (n == 0) return;
  if (n == 1) {
    out.push_back(byte_ids_[uint8_t(piece[0])]);
    return;
  }
  if (whole_piece_lookup_) {
    if (const auto id = find(piece)) {
      out.push_back(*id);
      return;
    }
  }
  // Symbols form a linked list over the piece's bytes; merging absorbs the right symbol.
  std::vector<int32_t> id(n), next(n), prev(n);
  for (size_t i = 0; i < n; ++i) {
    id[i] = byte_ids_[uint8_t(piece[i])];
    next[i] = i + 1 < n ? int32_t(i + 1) : -1;
    prev[i] = int32_t(i) - 1;
  }
  struct Candidate {
    int32_t rank, pos, left, right;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;  // lowest rank, then leftmost
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int32_t p) {
    if (p < 0 || next[p] < 0) return;
    if (const auto* m = pairs_.find(id[p], id[next[p]]))
      heap.push({m->rank, p, id[p], id[next[p]]});
  };
  for (size_t i = 0; i + 1 < n; ++i) consider(int32_t(i));
  std::vector<uint8_t> dead(n, 0);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t q = next[c.pos];
    // Stale if either side has merged since: a symbol's id changes whenever it absorbs, and a
    // symbol's right neighbour changes only when it absorbs.
    if (dead[c.pos] || q < 0 || id[c.pos] != c.left || id[q] != c.right) continue;
    id[c.pos] = pairs_.find(c.left, c.right)->merged;
    dead[q] = 1;
    next[c.pos] = next[q];
    if (next[q] >= 0) prev[next[q]] = c.pos;
    consider(prev[c.pos]);
    consider(c.pos);
  }
  for (int32_t p = 0; p >= 0; p = next[p]) out.push_back(id[p]);
}

}  // namespace glm4
