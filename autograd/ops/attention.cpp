// Causal scaled-dot-product attention with GQA and per-row key ranges (flash-style kernels).
#include "autograd/kernels/attention.h"

#include <cmath>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/recompute.h"
#include "base/check.h"

namespace glm4::ops {

namespace {
constexpr int64_t kBf16AttentionMinRows = 16;  // query rows from which bf16 tiles pay

// The kernel's arguments for q [B, T, Hq, D] against S keys of Hkv heads in a batch row, writing
// out and lse.
kernels::AttentionArgs attention_args(const Tensor& q, int64_t S, int64_t Hkv,
                                      const AttentionMask& mask, const ComputeChoice& compute,
                                      Tensor& out, Tensor& lse) {
  const int64_t B = q.dim(0), T = q.dim(1), Hq = q.dim(2), D = q.dim(3);
  GLM4_CHECK((mask.kv_begin.empty() || int64_t(mask.kv_begin.size()) == B) &&
                 (mask.kv_end.empty() || int64_t(mask.kv_end.size()) == B) &&
                 (mask.seg_start.empty() || int64_t(mask.seg_start.size()) == B * S),
             "[attention] mask sizes do not match batch ", B, " and key length ", S);
  out = Tensor::empty(q.shape());
  lse = Tensor::empty({B, Hq, T});
  kernels::AttentionArgs args;
  args.q = q.data();
  args.out = out.data();
  args.lse = lse.data();
  args.B = B;
  args.T = T;
  args.S = S;
  args.Hq = Hq;
  args.Hkv = Hkv;
  args.D = D;
  args.q_batch_stride = T * Hq * D;
  args.kv_batch_stride = S * Hkv * D;
  args.scale = float(1.0 / std::sqrt(double(D)));
  args.mask = &mask;
  // Inference under bf16 compute: prefill-sized query blocks on the bf16 units (decode rows stay
  // fp32: a single query row would use one sixteenth of a tile), unless compute.bf16_max_rows
  // keeps products that large on the fp32 path.
  const bool bf16_tiles = !GradMode::enabled() && !recompute_pending() &&
                          T >= kBf16AttentionMinRows && compute.bf16_units_take(T);
  args.bf16_tiles = bf16_tiles ? compute.kernel : kernels::Bf16Kernel::kNone;
  return args;
}

}  // namespace

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                 const ComputeChoice& compute) {
  GLM4_CHECK(q.rank() == 4 && k.rank() == 4 && v.rank() == 4 && k.shape() == v.shape() &&
                 q.dim(0) == k.dim(0) && q.dim(3) == k.dim(3) && k.dim(2) > 0 &&
                 q.dim(2) % k.dim(2) == 0,
             "[attention] q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ",
             shape_str(v.shape()), ": need q [B,T,Hq,D], k and v [B,S,Hkv,D], Hkv dividing Hq");
  Tensor out, lse;
  kernels::AttentionArgs args = attention_args(q, k.dim(1), k.dim(2), mask, compute, out, lse);
  args.k = k.data();
  args.v = v.data();
  kernels::attention_forward(args);
  return record(out, "attention", {q, k, v},
                {q.detach(), k.detach(), v.detach(), out.detach(), lse},
                [args, mask](Node& n, const Tensor& g) {
                  kernels::AttentionGradArgs ga;
                  ga.fwd = args;
                  ga.fwd.q = n.saved[0].data();
                  ga.fwd.k = n.saved[1].data();
                  ga.fwd.v = n.saved[2].data();
                  ga.fwd.out = n.saved[3].data();
                  ga.fwd.lse = n.saved[4].data();
                  ga.fwd.mask = &mask;
                  Tensor dq = Tensor::empty(n.saved[0].shape());
                  Tensor dk = Tensor::empty(n.saved[1].shape());
                  Tensor dv = Tensor::empty(n.saved[2].shape());
                  ga.dout = g.data();
                  ga.dq = dq.data();
                  ga.dk = dk.data();
                  ga.dv = dv.data();
                  kernels::attention_backward(ga);
                  return std::vector<Tensor>{dq, dk, dv};
                });
}

Tensor attention_bf16_kv(const Tensor& q, const uint16_t* k, const uint16_t* v, int64_t S,
                         int64_t Hkv, const AttentionMask& mask, const ComputeChoice& compute) {
  GLM4_CHECK(q.rank() == 4 && q.dim(0) == 1 && Hkv > 0 && q.dim(2) % Hkv == 0 && S >= 0,
             "[attention] q ", shape_str(q.shape()), " over a bf16 cache of ", S, " tokens of ",
             Hkv, " heads: need q [1,T,Hq,D], Hkv dividing Hq");
  GLM4_CHECK(!GradMode::enabled() || !q.requires_grad(),
             "[attention] a bf16 KV cache is for inference; run it under NoGradGuard");
  Tensor out, lse;
  kernels::AttentionArgs args = attention_args(q, S, Hkv, mask, compute, out, lse);
  args.k_bf16 = k;
  args.v_bf16 = v;
  kernels::attention_forward(args);
  return out;
}

}  // namespace glm4::ops
