#include "model/kv_cache.h"

#include <cstring>

#include "base/check.h"

namespace glm4 {

KvCache::KvCache(int64_t layers, int64_t batch, int64_t kv_heads, int64_t head_dim, int64_t chunk)
    : layers_(layers), batch_(batch), kv_heads_(kv_heads), head_dim_(head_dim), chunk_(chunk),
      k_(size_t(layers)), v_(size_t(layers)) {}

void KvCache::reserve(int64_t extra) {
  int64_t need = length_ + extra;
  if (need <= capacity_) return;
  int64_t cap = (need + chunk_ - 1) / chunk_ * chunk_;
  int64_t row = kv_heads_ * head_dim_;
  for (int64_t l = 0; l < layers_; ++l) {
    for (auto* buf : {&k_[l], &v_[l]}) {
      Tensor grown = Tensor::empty({batch_, cap, kv_heads_, head_dim_});
      if (buf->defined())
        for (int64_t b = 0; b < batch_; ++b)
          std::memcpy(grown.data() + b * cap * row, buf->data() + b * capacity_ * row,
                      size_t(length_ * row) * 4);
      *buf = grown;
    }
  }
  capacity_ = cap;
}

void KvCache::append(int64_t layer, const Tensor& k, const Tensor& v) {
  int64_t t = k.dim(1), row = kv_heads_ * head_dim_;
  GLM4_CHECK(k.dim(0) == batch_ && k.dim(2) == kv_heads_ && k.dim(3) == head_dim_ && k.shape() == v.shape(),
             "[kv_cache] keys ", shape_str(k.shape()), " for a cache of batch ", batch_, ", ",
             kv_heads_, " heads of ", head_dim_);
  GLM4_CHECK(length_ + t <= capacity_, "[kv_cache] append of ", t, " tokens without reserve");
  for (int64_t b = 0; b < batch_; ++b) {
    std::memcpy(k_[layer].data() + (b * capacity_ + length_) * row, k.data() + b * t * row, size_t(t * row) * 4);
    std::memcpy(v_[layer].data() + (b * capacity_ + length_) * row, v.data() + b * t * row, size_t(t * row) * 4);
  }
}

void KvCache::evict_middle(int64_t keep_first, int64_t keep_last) {
  if (length_ <= keep_first + keep_last) return;
  int64_t row = kv_heads_ * head_dim_, drop = length_ - keep_first - keep_last;
  for (int64_t l = 0; l < layers_; ++l)
    for (auto* buf : {&k_[l], &v_[l]})
      for (int64_t b = 0; b < batch_; ++b) {
        float* base = buf->data() + b * capacity_ * row;
        std::memmove(base + keep_first * row, base + (keep_first + drop) * row, size_t(keep_last * row) * 4);
      }
  length_ -= drop;
}

void KvCache::truncate(int64_t length) {
  GLM4_CHECK(length >= 0 && length <= length_, "[kv_cache] truncate to ", length, " of ", length_);
  length_ = length;
}

}  // namespace glm4
