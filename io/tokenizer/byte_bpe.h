// Byte-level BPE over raw byte strings: the model behind both tiktoken rank files and HF
// tokenizer.json byte-level BPE. A piece is split into single bytes, then the adjacent pair with
// the lowest merge rank is joined (leftmost on ties) until no pair can merge.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace glm4 {

// Open-addressing map (left id, right id) -> (rank, merged id).
class PairTable {
 public:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  // Keeps the first merge given for a pair; returns false if the pair was already present.
  bool insert(int32_t left, int32_t right, Merge m);
  const Merge* find(int32_t left, int32_t right) const;
  size_t size() const { return count_; }
  void reserve(size_t n);

 private:
  struct Slot {
    uint64_t key;
    Merge value;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  size_t slot_of(uint64_t key) const;
  void rehash(size_t slots);
  std::vector<Slot> slots_;
  size_t count_ = 0;
};

class ByteBpe {
 public:
  // tokens[id] is the raw byte string of id; an empty optional marks an unused id. Every single
  // byte 0..255 must be a token. Throws glm4::Error naming `source` otherwise.
  ByteBpe(std::vector<std::optional<std::string>> tokens, const std::string& source);

  // tiktoken semantics: the rank of a pair is the id of the concatenated bytes, if that is a
  // token; derives the merge table from the tokens.
  void derive_merges_from_ranks();
  // tokenizer.json semantics: merge `rank` joins left+right into merged (first one wins).
  void reserve_merges(size_t n) { pairs_.reserve(n); }
  bool add_merge(int32_t left, int32_t right, int32_t merged, int32_t rank) {
    return pairs_.insert(left, right, {rank, merged});
  }
  // If true, a piece that is itself a token is emitted whole (tiktoken always does this;
  // tokenizer.json says so with model.ignore_merges).
  void set_whole_piece_lookup(bool on) { whole_piece_lookup_ = on; }

  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

  std::optional<int32_t> find(std::string_view bytes) const;
  bool has_id(int32_t id) const {
    return id >= 0 && size_t(id) < tokens_.size() && tokens_[id].has_value();
  }
  const std::string& bytes_of(int32_t id) const { return *tokens_[id]; }
  int32_t id_limit() const { return int32_t(tokens_.size()); }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<std::optional<std::string>> tokens_;
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> ids_;
  int32_t byte_ids_[256];
  PairTable pairs_;
  bool whole_piece_lookup_ = false;
};

}  // namespace glm4
