#include "autograd/kernels/attention_tiles_bf16.h"

#include <algorithm>
#include <cstring>

#include "autograd/kernels/bf16_internal.h"
#include "autograd/kernels/cpu_features.h"
#include "base/check.h"

namespace glm4::kernels {

namespace {
using namespace bf16;
constexpr int64_t kMaxRows = 32, kMaxKeys = 64;

void panel(Bf16Kernel kernel, const PanelArgs& args) {
  if (kernel == Bf16Kernel::kAmx) amx_panel(args);
  else avx512_panel(args);
}
}  // namespace

Bf16AttentionTiles::Bf16AttentionTiles(Bf16Kernel kernel, int64_t d) : kernel_(kernel), d_(d) {
  GLM4_CHECK(kernel != Bf16Kernel::kNone && bf16_kernel_available(kernel),
             "[attention] bf16 tiles need AMX or AVX512-BF16");
  const int64_t kd = kblocks(d) * kBlockElems;
  q_.resize(size_t(groups(kMaxRows) * kd));
  k_.resize(size_t(groups(kMaxKeys) * kd));
  p_.resize(size_t(groups(kMaxRows) * kblocks(kMaxKeys) * kBlockElems));
  v_rows_.resize(size_t(kMaxKeys * kblocks(d) * kKBlock));
  v_.resize(size_t(groups(d) * kblocks(kMaxKeys) * kBlockElems));
  c_.resize(size_t(groups(kMaxRows) * kGroup * std::max(groups(kMaxKeys), groups(d)) * kGroup));
  if (kernel_ == Bf16Kernel::kAmx) {
    GLM4_CHECK(enable_amx(), "[attention] the kernel refused the AMX tile state");
    amx_begin();
  }
}

Bf16AttentionTiles::~Bf16AttentionTiles() {
  if (kernel_ == Bf16Kernel::kAmx) amx_end();
}

void Bf16AttentionTiles::set_query(const float* q, int64_t tq) {
  tq_ = tq;
  pack_rows_f32(q, tq, d_, d_, 0, groups(tq), kblocks(d_), q_.data());
}

void Bf16AttentionTiles::scores(const float* k, int64_t tk, float* s) {
  const int64_t kb = kblocks(d_), ldc = groups(tk) * kGroup;
  pack_pairs_f32(k, tk, d_, d_, 0, groups(tk), kb, k_.data());
  panel(kernel_, {q_.data(), groups(tq_), kb * kBlockElems, k_.data(), groups(tk), kb * kBlockElems,
                  0, kb, c_.data(), ldc, false});
  for (int64_t r = 0; r < tq_; ++r) std::memcpy(s + r * tk, c_.data() + r * ldc, size_t(tk) * 4);
}

void Bf16AttentionTiles::accumulate(const float* p, const float* v, int64_t tk, float* acc) {
  const int64_t kb = kblocks(tk), dp = kblocks(d_) * kKBlock;
  pack_rows_f32(p, tq_, tk, tk, 0, groups(tq_), kb, p_.data());
  round_rows_bf16(v, tk, d_, v_rows_.data());
  pack_pairs_bf16(v_rows_.data(), dp, 0, tk, 0, d_, v_.data());
  if (d_ % kGroup == 0) {  // acc's rows are whole column groups: add in place
    panel(kernel_, {p_.data(), groups(tq_), kb * kBlockElems, v_.data(), groups(d_), kb * kBlockElems,
                    0, kb, acc, d_, true});
    return;
  }
  const int64_t ldc = groups(d_) * kGroup;
  panel(kernel_, {p_.data(), groups(tq_), kb * kBlockElems, v_.data(), groups(d_), kb * kBlockElems,
                  0, kb, c_.data(), ldc, false});
  for (int64_t r = 0; r < tq_; ++r)
    for (int64_t c = 0; c < d_; ++c) acc[r * d_ + c] += c_[size_t(r * ldc + c)];
}

}  // namespace glm4::kernels
