// The tokenizer's vocabulary as a byte trie, built once per tokenizer and shared (read-only) by
// every constrained sequence. Nodes are stored in pre-order with the end of each subtree, so a walk
// that rejects a prefix skips the whole subtree in one jump.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/tokenizer/tokenizer.h"

namespace glm4::grammar {

class TokenTrie {
 public:
  // Every id below tokenizer.vocab_size() with text (Tokenizer::token_bytes) is in the trie.
  explicit TokenTrie(const Tokenizer& tokenizer);
  // token_bytes[id]: the bytes of token id, nullopt (or empty) for a token that is not text.
  explicit TokenTrie(const std::vector<std::optional<std::string>>& token_bytes);

  int32_t vocab_size() const { return int32_t(bytes_.size()); }
  bool is_text(int32_t id) const { return id >= 0 && id < vocab_size() && has_[size_t(id)]; }
  const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }

  // Node i (pre-order, i < node_count()) holds byte(i) at depth(i) >= 1; its subtree ends before
  // subtree_end(i); the tokens whose bytes end exactly here are tokens(i).
  size_t node_count() const { return byte_.size(); }
  uint8_t byte(size_t i) const { return byte_[i]; }
  int32_t depth(size_t i) const { return depth_[i]; }
  size_t subtree_end(size_t i) const { return end_[i]; }
  std::pair<const int32_t*, const int32_t*> tokens(size_t i) const {
    return {ids_.data() + first_[i], ids_.data() + first_[i + 1]};
  }
  int32_t max_depth() const { return max_depth_; }

 private:
  void build();

  std::vector<std::string> bytes_;
  std::vector<uint8_t> has_;
  std::vector<uint8_t> byte_;
  std::vector<int32_t> depth_;
  std::vector<size_t> end_;
  std::vector<size_t> first_;  // [node_count() + 1] ranges into ids_
  std::vector<int32_t> ids_;
  int32_t max_depth_ = 0;
};

}  // namespace glm4::grammar
