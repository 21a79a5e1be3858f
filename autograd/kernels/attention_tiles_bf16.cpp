#include "autograd/kernels/attention_tiles_bf16.h"

#include <algorithm>
#include <cstring>

#include "autograd/kernels/bf16_internal.h"
#include "base/check.h"

namespace glm4::kernels {

namespace {
using namespace bf16;
constexpr int64_t kMaxRows = 32, kMaxKeys = 64;

}  // namespace

void Bf16KeysValues::pack(const float* keys, const float* values, int64_t ld, int64_t S_,
                          int64_t d_) {
  S = S_;
  d = d_;
  const int64_t kb = kblocks(d), dp = kb * kKBlock;
  k.assign(size_t(groups(S) * kb * kBlockElems), 0);
  pack_pairs_f32(keys, S, d, ld, 0, groups(S), kb, k.data());
  std::vector<uint16_t> rows(size_t(S * dp));
  for (int64_t j = 0; j < S; ++j) round_rows_bf16(values + j * ld, 1, d, rows.data() + j * dp);
  v.assign(size_t(groups(d) * kblocks(S) * kBlockElems), 0);
  pack_pairs_bf16(rows.data(), dp, 0, S, 0, d, v.data());
}

Bf16AttentionTiles::Bf16AttentionTiles(Bf16Kernel kernel, int64_t d)
    : isa_(isa_of(kernel, "attention")), d_(d) {
  q_.resize(size_t(groups(kMaxRows) * kblocks(d) * kBlockElems));
  p_.resize(size_t(groups(kMaxRows) * kblocks(kMaxKeys) * kBlockElems));
  c_.resize(size_t(groups(kMaxRows) * kGroup * std::max(groups(kMaxKeys), groups(d)) * kGroup));
  isa_.begin();
}

Bf16AttentionTiles::~Bf16AttentionTiles() { isa_.end(); }

void Bf16AttentionTiles::set_query(const float* q, int64_t tq) {
  tq_ = tq;
  pack_rows_f32(q, tq, d_, d_, 0, groups(tq), kblocks(d_), q_.data());
}

void Bf16AttentionTiles::scores(const Bf16KeysValues& kv, int64_t k0, int64_t tk, float* s) {
  const int64_t kb = kblocks(d_), ldc = groups(tk) * kGroup, stride = kb * kBlockElems;
  isa_.panel({q_.data(), groups(tq_), stride, kv.k.data() + (k0 / kGroup) * stride, groups(tk),
              stride, 0, kb, c_.data(), ldc, false});
  for (int64_t r = 0; r < tq_; ++r) std::memcpy(s + r * tk, c_.data() + r * ldc, size_t(tk) * 4);
}

void Bf16AttentionTiles::accumulate(const float* p, const Bf16KeysValues& kv, int64_t k0,
                                    int64_t tk, float* acc) {
  const int64_t kb = kblocks(tk), v_stride = kblocks(kv.S) * kBlockElems;
  pack_rows_f32(p, tq_, tk, tk, 0, groups(tq_), kb, p_.data());
  const uint16_t* v = kv.v.data() + (k0 / kKBlock) * kBlockElems;  // k-block k0 / 32 of each group
  if (d_ % kGroup == 0) {  // acc's rows are whole column groups: add in place
    isa_.panel(
        {p_.data(), groups(tq_), kb * kBlockElems, v, groups(d_), v_stride, 0, kb, acc, d_, true});
    return;
  }
  const int64_t ldc = groups(d_) * kGroup;
  isa_.panel({p_.data(), groups(tq_), kb * kBlockElems, v, groups(d_), v_stride, 0, kb, c_.data(),
              ldc, false});
  for (int64_t r = 0; r < tq_; ++r)
    for (int64_t c = 0; c < d_; ++c) acc[r * d_ + c] += c_[size_t(r * ldc + c)];
}

}  // namespace glm4::kernels
