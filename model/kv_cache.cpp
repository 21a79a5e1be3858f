#include "model/kv_cache.h"

#include <cstring>

#include "autograd/kernels/convert.h"
#include "base/check.h"

namespace glm4 {

Tensor CachedTokens::to_f32() const {
  if (!bf16) return f32;
  Tensor out = Tensor::empty({1, tokens, heads, width / heads});
  convert_to_f32_parallel(DType::BF16, bf16, tokens * width, out.data());
  return out;
}

KvCache::KvCache(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t chunk, bool keys_only,
                 DType dtype)
    : layers_(layers),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      chunk_(chunk),
      keys_only_(keys_only),
      dtype_(dtype),
      k_(dtype == DType::F32 ? size_t(layers) : 0),
      v_(dtype == DType::F32 && !keys_only ? size_t(layers) : 0),
      k16_(dtype == DType::BF16 ? size_t(layers) : 0),
      v16_(dtype == DType::BF16 && !keys_only ? size_t(layers) : 0) {
  GLM4_CHECK(layers > 0 && kv_heads > 0 && head_dim > 0 && chunk > 0, "[kv_cache] layers ", layers,
             ", kv heads ", kv_heads, ", head dim ", head_dim, ", chunk ", chunk,
             " must be positive");
  GLM4_CHECK(dtype == DType::F32 || dtype == DType::BF16, "[kv_cache] a ", dtype_name(dtype),
             " cache: only fp32 or bf16");
}

void KvCache::begin(int64_t tokens) {
  GLM4_CHECK(tokens > 0, "[kv_cache] begin(", tokens, ")");
  pending_ = 0;
  const int64_t need = length_ + tokens;
  if (need > capacity_) {
    const int64_t cap = (need + chunk_ - 1) / chunk_ * chunk_;
    const size_t kept = size_t(length_ * kv_heads_ * head_dim_) * sizeof(float);
    for (std::vector<Tensor>* side : {&k_, &v_})
      for (Tensor& buf : *side) {
        Tensor grown = Tensor::empty({cap, kv_heads_, head_dim_});
        if (buf.defined() && kept) std::memcpy(grown.data(), buf.data(), kept);
        buf = grown;
      }
    for (std::vector<PoolBuffer>* side : {&k16_, &v16_})
      for (PoolBuffer& buf : *side)
        buf.grow(size_t(cap * kv_heads_ * head_dim_) * sizeof(uint16_t),
                 size_t(length_ * kv_heads_ * head_dim_) * sizeof(uint16_t));
    capacity_ = cap;
  }
  pending_ = tokens;
}

void KvCache::store(const Tensor& from, Tensor* f32, PoolBuffer* bf16) const {
  const int64_t at = length_ * kv_heads_ * head_dim_, count = pending_ * kv_heads_ * head_dim_;
  const float* values = from.data();
  if (f32) {
    std::memcpy(f32->data() + at, values, size_t(count) * sizeof(float));
    return;
  }
  uint16_t* to = bf16->as<uint16_t>() + at;
  for (int64_t i = 0; i < count; ++i) to[i] = f32_to_bf16(values[i]);
}

CachedTokens KvCache::seen(const Tensor* f32, const PoolBuffer* bf16) const {
  CachedTokens out;
  out.tokens = length_ + pending_;
  out.heads = keys_only_ ? 1 : kv_heads_;
  out.width = kv_heads_ * head_dim_;
  if (f32)
    out.f32 = f32->view_prefix({1, out.tokens, out.heads, out.width / out.heads});
  else
    out.bf16 = bf16->as<uint16_t>();
  return out;
}

CachedTokens KvCache::append_keys(int64_t layer, const Tensor& k) {
  GLM4_CHECK(keys_only_, "[kv_cache] append_keys on a cache of keys and values");
  GLM4_CHECK(pending_ > 0, "[kv_cache] append without begin");
  GLM4_CHECK(layer >= 0 && layer < layers_, "[kv_cache] layer ", layer, " of ", layers_);
  GLM4_CHECK(k.numel() == pending_ * kv_heads_ * head_dim_ && k.dim(-1) == head_dim_ &&
                 k.dim(-2) == kv_heads_,
             "[kv_cache] keys ", shape_str(k.shape()), " for a step of ", pending_, " tokens of ",
             kv_heads_, " heads of ", head_dim_);
  const size_t l = size_t(layer);
  Tensor* f32 = dtype_ == DType::F32 ? &k_[l] : nullptr;
  PoolBuffer* bf16 = f32 ? nullptr : &k16_[l];
  store(k, f32, bf16);
  return seen(f32, bf16);
}

std::pair<CachedTokens, CachedTokens> KvCache::append(int64_t layer, const Tensor& k,
                                                      const Tensor& v) {
  GLM4_CHECK(!keys_only_, "[kv_cache] append of values to a keys-only cache");
  GLM4_CHECK(pending_ > 0, "[kv_cache] append without begin");
  GLM4_CHECK(layer >= 0 && layer < layers_, "[kv_cache] layer ", layer, " of ", layers_);
  GLM4_CHECK(k.shape() == v.shape() && k.numel() == pending_ * kv_heads_ * head_dim_ &&
                 k.dim(-1) == head_dim_ && k.dim(-2) == kv_heads_,
             "[kv_cache] keys ", shape_str(k.shape()), " and values ", shape_str(v.shape()),
             " for a step of ", pending_, " tokens of ", kv_heads_, " heads of ", head_dim_);
  const size_t l = size_t(layer);
  const bool wide = dtype_ == DType::F32;
  Tensor *kf = wide ? &k_[l] : nullptr, *vf = wide ? &v_[l] : nullptr;
  PoolBuffer *kb = wide ? nullptr : &k16_[l], *vb = wide ? nullptr : &v16_[l];
  store(k, kf, kb);
  store(v, vf, vb);
  return {seen(kf, kb), seen(vf, vb)};
}

void KvCache::commit() {
  GLM4_CHECK(pending_ > 0, "[kv_cache] commit without begin");
  length_ += pending_;
  pending_ = 0;
}

void KvCache::evict_middle(int64_t keep_first, int64_t keep_last) {
  GLM4_CHECK(pending_ == 0, "[kv_cache] evict during a step");
  if (length_ <= keep_first + keep_last) return;
  const int64_t row = kv_heads_ * head_dim_, drop = length_ - keep_first - keep_last;
  for (std::vector<Tensor>* side : {&k_, &v_})
    for (Tensor& buf : *side)
      std::memmove(buf.data() + keep_first * row, buf.data() + (keep_first + drop) * row,
                   size_t(keep_last * row) * sizeof(float));
  for (std::vector<PoolBuffer>* side : {&k16_, &v16_})
    for (PoolBuffer& buf : *side) {
      uint16_t* values = buf.as<uint16_t>();
      std::memmove(values + keep_first * row, values + (keep_first + drop) * row,
                   size_t(keep_last * row) * sizeof(uint16_t));
    }
  length_ -= drop;
}

void KvCache::truncate(int64_t length) {
  GLM4_CHECK(length >= 0 && length <= length_, "[kv_cache] truncate to ", length, " of ", length_);
  pending_ = 0;
  length_ = length;
}

}  // namespace glm4
