// The keys and values one sequence has fed, per layer [capacity, Hkv, D], growing in chunks.
// A forward pass over new tokens follows one protocol, which the cache checks:
//   begin(T)            room for T more tokens (an unfinished earlier step is dropped);
//   append(layer, k, v) per layer: stores that layer's T keys/values after length() and returns
//                       views [1, length() + T, Hkv, D] of everything to attend to;
//   commit()            the T tokens become part of length().
// A keys-only cache (glm4_moe_lite's latent cache: one "head" of kv_lora_rank + qk_rope_head_dim
// values a token) stores no values and appends with append_keys.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "autograd/tensor.h"

namespace glm4 {

class KvCache {
 public:
  KvCache(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t chunk = 256,
          bool keys_only = false);

  int64_t length() const { return length_; }  // tokens committed
  int64_t capacity() const { return capacity_; }
  int64_t pending() const { return pending_; }  // tokens of the step begun, not yet committed

  void begin(int64_t tokens);
  // k, v [T, Hkv, D] (or [1, T, Hkv, D]) with T = the tokens begun.
  std::pair<Tensor, Tensor> append(int64_t layer, const Tensor& k, const Tensor& v);
  // The keys-only form: k [T, Hkv, D] (or [1, T, Hkv, D]) -> a view [1, length() + T, Hkv, D].
  Tensor append_keys(int64_t layer, const Tensor& k);
  bool keys_only() const { return keys_only_; }
  void commit();

  // Drops the tokens [keep_first, length - keep_last) (the --max-kv-size window).
  void evict_middle(int64_t keep_first, int64_t keep_last);
  void truncate(int64_t length);
  // Bytes of key/value storage held.
  int64_t bytes() const {
    return (keys_only_ ? 1 : 2) * layers_ * capacity_ * kv_heads_ * head_dim_ *
           int64_t(sizeof(float));
  }

 private:
  int64_t layers_, kv_heads_, head_dim_, chunk_;
  int64_t length_ = 0, capacity_ = 0, pending_ = 0;
  bool keys_only_ = false;
  std::vector<Tensor> k_, v_;  // per layer [capacity, Hkv, D]; v_ empty when keys_only_
};

}  // namespace glm4
