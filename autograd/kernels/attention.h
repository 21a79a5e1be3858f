// Flash-style attention kernels on raw strided buffers: online softmax over key tiles, so no
// [T, S] matrix exists beyond one tile per task. Used by ops::attention and by the KV cache.
#pragma once
#include <cstdint>

#include "autograd/attention_mask.h"
#include "autograd/kernels/kernel_selection.h"

namespace glm4::kernels {

struct AttentionArgs {
  const float* q = nullptr;  // [B, T, Hq, D], batch stride q_batch_stride
  const float* k = nullptr;  // [B, S, Hkv, D], batch stride kv_batch_stride
  const float* v = nullptr;  // same layout as k
  // Inference over a bf16 KV cache: k and v as bf16 values (same layout), widened as they are
  // read, in place of k and v. The backward takes fp32 ones only.
  const uint16_t* k_bf16 = nullptr;
  const uint16_t* v_bf16 = nullptr;
  float* out = nullptr;  // [B, T, Hq, D], contiguous
  float* lse = nullptr;  // [B, Hq, T] log-sum-exp per row (for backward); +inf for empty rows
  int64_t B = 0, T = 0, S = 0, Hq = 0, Hkv = 0, D = 0;
  int64_t q_batch_stride = 0, kv_batch_stride = 0;
  float scale = 1.0f;
  const AttentionMask* mask = nullptr;
  // QK^T and PV on this kernel's bf16 units (attention_tiles_bf16.h), kNone: fp32. Inference
  // under --compute bf16; the backward recomputes the probabilities in fp32, so a forward for
  // training leaves this off.
  Bf16Kernel bf16_tiles = Bf16Kernel::kNone;
};

void attention_forward(const AttentionArgs& a);

struct AttentionGradArgs {
  AttentionArgs fwd;  // q, k, v, out, lse as saved by the forward (contiguous)
  const float* dout;  // [B, T, Hq, D]
  float* dq;          // [B, T, Hq, D] (written)
  float* dk;          // [B, S, Hkv, D] (written)
  float* dv;          // [B, S, Hkv, D] (written)
};

void attention_backward(const AttentionGradArgs& a);

}  // namespace glm4::kernels
