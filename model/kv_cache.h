// The keys and values one sequence has fed, per layer [capacity, Hkv, D], growing in chunks.
// A forward pass over new tokens follows one protocol, which the cache checks:
//   begin(T)            room for T more tokens (an unfinished earlier step is dropped);
//   append(layer, k, v) per layer: stores that layer's T keys/values after length() and returns
//                       views of everything to attend to, length() + T tokens;
//   commit()            the T tokens become part of length().
// A keys-only cache (glm4_moe_lite's latent cache: one "head" of kv_lora_rank + qk_rope_head_dim
// values a token) stores no values and appends with append_keys. Either may hold its values in
// bf16 (--kv-cache bf16: half the memory and the bytes each decode step reads, rounded as torch
// rounds), which their readers widen as they go.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "autograd/storage_pool.h"
#include "autograd/tensor.h"
#include "base/dtype.h"

namespace glm4 {

// One layer's cached keys or values, [tokens, heads, width / heads] in the cache's dtype; `bf16`
// points into the cache, valid until its next begin().
struct CachedTokens {
  Tensor f32;                      // an fp32 cache's: a view [1, tokens, heads, width / heads]
  const uint16_t* bf16 = nullptr;  // a bf16 cache's
  int64_t tokens = 0, heads = 1, width = 0;
  // The values as fp32 [1, tokens, heads, width / heads]: the view, or a widened copy of bf16 ones.
  Tensor to_f32() const;
};

class KvCache {
 public:
  // dtype F32 or BF16.
  KvCache(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t chunk = 256,
          bool keys_only = false, DType dtype = DType::F32);

  int64_t length() const { return length_; }  // tokens committed
  int64_t capacity() const { return capacity_; }
  int64_t pending() const { return pending_; }  // tokens of the step begun, not yet committed

  void begin(int64_t tokens);
  // k, v [T, Hkv, D] (or [1, T, Hkv, D]) with T = the tokens begun -> the layer's keys and
  // values so far, these included.
  std::pair<CachedTokens, CachedTokens> append(int64_t layer, const Tensor& k, const Tensor& v);
  // The keys-only form: k [T, Hkv * D] values a token (any shape of that many) -> the layer's
  // keys so far, these included (length() + T tokens of Hkv * D).
  CachedTokens append_keys(int64_t layer, const Tensor& k);
  bool keys_only() const { return keys_only_; }
  DType dtype() const { return dtype_; }
  void commit();

  // Drops the tokens [keep_first, length - keep_last) (the --max-kv-size window).
  void evict_middle(int64_t keep_first, int64_t keep_last);
  void truncate(int64_t length);
  // Bytes of key/value storage held.
  int64_t bytes() const {
    return (keys_only_ ? 1 : 2) * layers_ * capacity_ * kv_heads_ * head_dim_ *
           int64_t(dtype_size(dtype_));
  }

 private:
  int64_t layers_, kv_heads_, head_dim_, chunk_;
  int64_t length_ = 0, capacity_ = 0, pending_ = 0;
  bool keys_only_ = false;
  DType dtype_ = DType::F32;
  // fp32: per layer [capacity, Hkv, D]; bf16: per layer capacity * Hkv * D values, from the
  // tensor storage pool as fp32 tensors' are (2 MB pages from 2 MB up: a long context's cache
  // read every step in 4 KB pages would cost page walks). The values' vectors are empty when
  // keys_only_.
  std::vector<Tensor> k_, v_;
  std::vector<PoolBuffer> k16_, v16_;

  // Stores the pending tokens' `from` after the first length_ of a layer's keys or values.
  void store(const Tensor& from, Tensor* f32, PoolBuffer* bf16) const;
  CachedTokens seen(const Tensor* f32, const PoolBuffer* bf16) const;
};

}  // namespace glm4
