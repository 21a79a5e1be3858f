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
}  // namespace

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                 const ComputeChoice& compute) {
  GLM4_CHECK(q.rank() == 4 && k.rank() == 4 && v.rank() == 4 && k.shape() == v.shape() &&
                 q.dim(0) == k.dim(0) && q.dim(3) == k.dim(3) && k.dim(2) > 0 &&
                 q.dim(2) % k.dim(2) == 0,
             "[attention] q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ",
             shape_str(v.shape()), ": need q [B,T,Hq,D], k and v [B,S,Hkv,D], Hkv dividing Hq");
  int64_t B = q.dim(0), T = q.dim(1), Hq = q.dim(2), D = q.dim(3), S = k.dim(1), Hkv = k.dim(2);
  GLM4_CHECK((mask.kv_begin.empty() || int64_t(mask.kv_begin.size()) == B) &&
                 (mask.kv_end.empty() || int64_t(mask.kv_end.size()) == B) &&
                 (mask.seg_start.empty() || int64_t(mask.seg_start.size()) == B * S),
             "[attention] mask sizes do not match batch ", B, " and key length ", S);
  Tensor out = Tensor::empty(q.shape());
  Tensor lse = Tensor::empty({B, Hq, T});
  kernels::AttentionArgs args;
  args.q = q.data();
  args.k = k.data();
  args.v = v.data();
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

}  // namespace glm4::ops
