// Building the trie: the tokens sorted by their bytes are inserted in order, so new nodes come
// out in pre-order and a node's subtree is closed when a later token leaves its prefix.
#include "infer/grammar/token_trie.h"

#include <algorithm>
#include <numeric>

#include "base/check.h"

namespace glm4::grammar {

TokenTrie::TokenTrie(const Tokenizer& tokenizer) {
  const int32_t n = tokenizer.vocab_size();
  bytes_.resize(size_t(n));
  has_.assign(size_t(n), 0);
  for (int32_t id = 0; id < n; ++id) {
    if (auto b = tokenizer.token_bytes(id); b && !b->empty()) {
      bytes_[size_t(id)] = std::move(*b);
      has_[size_t(id)] = 1;
    }
  }
  build();
}

TokenTrie::TokenTrie(const std::vector<std::optional<std::string>>& token_bytes) {
  bytes_.resize(token_bytes.size());
  has_.assign(token_bytes.size(), 0);
  for (size_t id = 0; id < token_bytes.size(); ++id)
    if (token_bytes[id] && !token_bytes[id]->empty()) {
      bytes_[id] = *token_bytes[id];
      has_[id] = 1;
    }
  build();
}

void TokenTrie::build() {
  std::vector<int32_t> order;
  for (int32_t id = 0; id < vocab_size(); ++id)
    if (has_[size_t(id)]) order.push_back(id);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return bytes_[size_t(a)] < bytes_[size_t(b)]; });
  std::vector<size_t> path;  // path[d]: the node at depth d + 1 on the current prefix
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& s = bytes_[size_t(id)];
    size_t common = 0;
    if (prev)
      while (common < prev->size() && common < s.size() && (*prev)[common] == s[common]) ++common;
    for (size_t d = common; d < path.size(); ++d) end_[path[d]] = byte_.size();  // closed
    path.resize(common);
    for (size_t d = common; d < s.size(); ++d) {
      path.push_back(byte_.size());
      byte_.push_back(uint8_t(s[d]));
      depth_.push_back(int32_t(d + 1));
      end_.push_back(0);
      first_.push_back(ids_.size());
    }
    // Tokens are added in sorted order, so the ids of this node are the last ones added.
    ids_.push_back(id);
    max_depth_ = std::max(max_depth_, int32_t(s.size()));
    prev = &s;
  }
  for (size_t node : path) end_[node] = byte_.size();
  // first_[i] was recorded when node i was created; the ids for node i are those pushed while it
  // was the deepest node, i.e. [first_[i], first_[i + 1]).
  first_.push_back(ids_.size());
}

}  // namespace glm4::grammar
