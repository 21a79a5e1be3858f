// Per-layer key/value cache for decoding: [B, capacity, Hkv, D] buffers that grow in chunks.
#pragma once
#include <cstdint>
#include <vector>

#include "autograd/tensor.h"

namespace glm4 {

class KvCache {
 public:
  KvCache(int64_t layers, int64_t batch, int64_t kv_heads, int64_t head_dim, int64_t chunk = 256);

  int64_t length() const { return length_; }      // tokens cached (same for every row)
  int64_t capacity() const { return capacity_; }
  int64_t batch() const { return batch_; }
  // Makes room for `extra` more tokens (grows every layer by whole chunks).
  void reserve(int64_t extra);
  // Copies k, v [B, T, Hkv, D] of `layer` in at position length(); commit() advances length.
  void append(int64_t layer, const Tensor& k, const Tensor& v);
  void commit(int64_t tokens) { length_ += tokens; }
  // Drops the tokens [keep_first, length - keep_last) (the --max-kv-size window).
  void evict_middle(int64_t keep_first, int64_t keep_last);
  void truncate(int64_t length);
  const float* keys(int64_t layer) const { return k_[layer].data(); }
  const float* values(int64_t layer) const { return v_[layer].data(); }
  int64_t batch_stride() const { return capacity_ * kv_heads_ * head_dim_; }

 private:
  int64_t layers_, batch_, kv_heads_, head_dim_, chunk_;
  int64_t length_ = 0, capacity_ = 0;
  std::vector<Tensor> k_, v_;  // per layer [B, capacity, Hkv, D]
};

}  // namespace glm4
