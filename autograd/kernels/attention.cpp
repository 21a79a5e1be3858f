#include "autograd/kernels/attention.h"

// GCC 12 flags the self-initialised "undefined" vectors inside its own AVX-512 intrinsics where
// Eigen's GEMM kernels inline them (here for strided maps), so for the whole file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "autograd/kernels/attention_decode.h"
#include "autograd/kernels/attention_tiles_bf16.h"
#include "autograd/kernels/convert.h"
#include "autograd/kernels/vec_math.h"
#include "autograd/storage_pool.h"
#include "base/parallel.h"

namespace glm4::kernels {

namespace {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapMat = Eigen::Map<RowMat>;
using StridedMat = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
constexpr int64_t kTileQ = 32;
constexpr int64_t kTileK = 64;

// Copies `rows` rows of length d with source stride `stride` into a contiguous buffer.
void gather_rows(const float* src, int64_t stride, int64_t rows, int64_t d, float* dst) {
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * d, src + r * stride, size_t(d) * 4);
}

struct RowRanges {
  std::vector<int64_t> lo, hi;
  int64_t min_lo = 0, max_hi = 0;
  void compute(const AttentionMask& m, int64_t b, int64_t t0, int64_t rows, int64_t S) {
    lo.resize(size_t(rows));
    hi.resize(size_t(rows));
    min_lo = S;
    max_hi = 0;
    for (int64_t r = 0; r < rows; ++r) {
      m.range(b, t0 + r, S, &lo[r], &hi[r]);
      if (lo[r] < hi[r]) {
        min_lo = std::min(min_lo, lo[r]);
        max_hi = std::max(max_hi, hi[r]);
      }
    }
  }
};
// The keys a decode task takes: enough ranges of whole key tiles for kMinDecodeTasks tasks over
// `heads` (batch rows x kv heads). The cut follows the shapes alone, so the sums are the same on
// any thread count.
constexpr int64_t kMinDecodeTasks = 16;
int64_t decode_range(int64_t keys, int64_t heads) {
  const int64_t ranges = (kMinDecodeTasks + heads - 1) / heads;
  return std::max<int64_t>(1, (keys + ranges * kTileK - 1) / (ranges * kTileK)) * kTileK;
}

}  // namespace

void attention_forward(const AttentionArgs& a) {
  const int64_t group = a.Hq / a.Hkv, d = a.D;
  const int64_t q_tiles = (a.T + kTileQ - 1) / kTileQ;
  // One query a row (decode): a task takes every query head of a kv head, so the group reads its
  // keys and values once, not once a head, over one range of the keys (the ranges' sums are
  // joined in order below), so that a long context keeps every thread busy however few kv heads
  // there are. Otherwise a task is a tile of one head's queries.
  const bool heads_as_rows = a.T == 1 && group > 1 && group <= kTileQ;
  if (a.k_bf16 && (!heads_as_rows || a.bf16_tiles != Bf16Kernel::kNone)) {
    // Several tasks read each key (a head's query tiles, the heads of a group), or the bf16 units
    // pack them: a bf16 cache is widened once, exactly, and read as fp32.
    const int64_t n = a.B * a.kv_batch_stride;
    // Pool pages, which the next prefill chunk reuses.
    const PoolBuffer keys(size_t(n) * sizeof(float)), values(size_t(n) * sizeof(float));
    convert_to_f32_parallel(DType::BF16, a.k_bf16, n, keys.as<float>());
    convert_to_f32_parallel(DType::BF16, a.v_bf16, n, values.as<float>());
    AttentionArgs wide = a;
    wide.k = keys.as<float>();
    wide.v = values.as<float>();
    wide.k_bf16 = wide.v_bf16 = nullptr;
    attention_forward(wide);
    return;
  }
  AttentionMask no_mask;
  const AttentionMask& mask = a.mask ? *a.mask : no_mask;
  const bool bf16_kv = a.k_bf16 != nullptr;  // a decode step's on fp32 units: read in place
  std::vector<Bf16KeysValues> packed(a.bf16_tiles != Bf16Kernel::kNone ? size_t(a.B * a.Hkv) : 0);
  parallel_for(int64_t(packed.size()), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t offset = (i / a.Hkv) * a.kv_batch_stride + (i % a.Hkv) * d;
      packed[size_t(i)].pack(a.k + offset, a.v + offset, a.Hkv * d, a.S, d);
    }
  });
  const int64_t range = decode_range(a.S, a.B * a.Hkv);
  const int64_t ranges = heads_as_rows ? std::max<int64_t>(1, (a.S + range - 1) / range) : 1;
  const int64_t tasks = heads_as_rows ? a.B * a.Hkv * ranges : a.B * a.Hq * q_tiles;
  // Where the build has it, the decode kernel takes such a task's range (for groups of 16 heads
  // of 128 dims 8-15% faster than the tiles below on AVX-512, level on Zen 3's AVX2; it reads
  // bf16 keys in place, 1.2-1.3x the tiles there).
  const bool decode_kernel = a.bf16_tiles == Bf16Kernel::kNone && attention_decode_available();
  // heads_as_rows: each task's sums before division [group, d], maxima and totals [group].
  const size_t parts = heads_as_rows ? size_t(tasks) : 0;
  std::vector<float> part_acc(parts * size_t(group * d)), part_m(parts * size_t(group)),
      part_l(part_m.size());
  parallel_for(tasks, 1, [&](int64_t lo_task, int64_t hi_task) {
    std::vector<float> qbuf(kTileQ * d), sbuf(kTileQ * kTileK), acc(kTileQ * d), m(kTileQ),
        l(kTileQ);
    std::vector<float> kbuf(bf16_kv ? kTileK * d : 0), vbuf(kbuf.size());  // a bf16 tile, widened
    RowRanges rr;
    std::optional<Bf16AttentionTiles> tiles;
    if (a.bf16_tiles != Bf16Kernel::kNone) tiles.emplace(a.bf16_tiles, d);
    for (int64_t task = lo_task; task < hi_task; ++task) {
      // Row r of the task is query t0 + r of head h, or (heads_as_rows) query 0 of head h + r.
      int64_t b, h, t0, kvh, tq;
      if (heads_as_rows) {
        const int64_t head_task = task / ranges, part = task % ranges;
        b = head_task / a.Hkv, kvh = head_task % a.Hkv, h = kvh * group, t0 = 0, tq = group;
        rr.compute(mask, b, 0, 1, a.S);
        rr.min_lo = std::max(rr.lo[0], part * range);
        rr.max_hi = std::min(rr.hi[0], (part + 1) * range);
        if (rr.min_lo >= rr.max_hi) rr.min_lo = rr.max_hi = 0;  // nothing of this range is seen
        rr.lo.assign(size_t(tq), rr.min_lo);
        rr.hi.assign(size_t(tq), rr.max_hi);
      } else {
        b = task / (a.Hq * q_tiles), h = (task / q_tiles) % a.Hq, t0 = (task % q_tiles) * kTileQ;
        kvh = h / group, tq = std::min(kTileQ, a.T - t0);
        rr.compute(mask, b, t0, tq, a.S);
      }
      const int64_t head_step = heads_as_rows ? 1 : 0, query_step = heads_as_rows ? 0 : 1;
      const float* qsrc = a.q + b * a.q_batch_stride + (t0 * a.Hq + h) * d;
      gather_rows(qsrc, heads_as_rows ? d : a.Hq * d, tq, d, qbuf.data());
      for (int64_t i = 0; i < tq * d; ++i) qbuf[i] *= a.scale;
      if (tiles) tiles->set_query(qbuf.data(), tq);
      std::fill_n(acc.data(), kTileQ * d, 0.0f);
      std::fill_n(m.data(), tq, -INFINITY);
      std::fill_n(l.data(), tq, 0.0f);
      const int64_t kv_offset = b * a.kv_batch_stride + kvh * d;
      if (heads_as_rows && decode_kernel) {  // this range's part, for the join below
        DecodePart part{part_acc.data() + task * tq * d, part_m.data() + task * tq,
                        part_l.data() + task * tq};
        if (rr.min_lo >= rr.max_hi) {
          std::fill_n(part.m, tq, -INFINITY);
          std::fill_n(part.l, tq, 0.0f);
          continue;
        }
        DecodeKeys keys;
        if (bf16_kv) {
          keys.k16 = a.k_bf16 + kv_offset;
          keys.v16 = a.v_bf16 + kv_offset;
        } else {
          keys.k = a.k + kv_offset;
          keys.v = a.v + kv_offset;
        }
        keys.stride = a.Hkv * d;
        keys.d = keys.dv = d;
        attention_decode_rows(qbuf.data(), tq, keys, rr.min_lo, rr.max_hi, part);
        continue;
      }
      const Bf16KeysValues* kv = tiles ? &packed[size_t(b * a.Hkv + kvh)] : nullptr;
      // The bf16 tiles start at multiples of 64 keys (the packing's blocks); keys before a row's
      // range are masked below like any other.
      const int64_t first = tiles ? rr.min_lo / kTileK * kTileK : rr.min_lo;
      for (int64_t k0 = first; k0 < rr.max_hi; k0 += kTileK) {
        int64_t tk = std::min(kTileK, rr.max_hi - k0);
        // fp32 K and V are read in place (rows Hkv * d apart), bf16 ones (a decode step's, where
        // the build has no decode kernel) widened into a tile.
        const int64_t at = kv_offset + k0 * a.Hkv * d;
        const float *ktile = kbuf.data(), *vtile = vbuf.data();
        int64_t ld = d;
        if (!bf16_kv) {
          ktile = a.k + at, vtile = a.v + at, ld = a.Hkv * d;
        } else {
          convert_block_to_f32(DType::BF16, a.k_bf16 + at, a.Hkv * d, tk, d, kbuf.data());
          convert_block_to_f32(DType::BF16, a.v_bf16 + at, a.Hkv * d, tk, d, vbuf.data());
        }
        const StridedMat K(ktile, tk, d, Eigen::OuterStride<>(ld));
        const StridedMat V(vtile, tk, d, Eigen::OuterStride<>(ld));
        MapMat S(sbuf.data(), tq, tk);
        if (tiles)
          tiles->scores(*kv, k0, tk, sbuf.data());
        else
          S.noalias() = MapMat(qbuf.data(), tq, d) * K.transpose();
        for (int64_t r = 0; r < tq; ++r) {
          float* srow = sbuf.data() + r * tk;
          int64_t jlo = std::clamp<int64_t>(rr.lo[r] - k0, 0, tk);
          int64_t jhi = std::clamp<int64_t>(rr.hi[r] - k0, 0, tk);
          if (jlo >= jhi) {
            std::fill_n(srow, tk, 0.0f);
            continue;
          }
          std::fill(srow, srow + jlo, -INFINITY);  // masked keys: exp gives exactly 0
          std::fill(srow + jhi, srow + tk, -INFINITY);
          float new_m = std::max(m[r], kernels::max_of(srow + jlo, jhi - jlo));
          float alpha = std::exp(m[r] - new_m);
          float sum = float(exp_shifted(srow, new_m, srow, tk));
          l[r] = l[r] * alpha + sum;
          m[r] = new_m;
          float* arow = acc.data() + r * d;
          for (int64_t c = 0; c < d; ++c) arow[c] *= alpha;
        }
        if (tiles)
          tiles->accumulate(sbuf.data(), *kv, k0, tk, acc.data());
        else
          MapMat(acc.data(), tq, d).noalias() += S * V;
      }
      if (heads_as_rows) {  // this range's part, joined below
        std::copy_n(acc.data(), tq * d, part_acc.data() + task * tq * d);
        std::copy_n(m.data(), tq, part_m.data() + task * tq);
        std::copy_n(l.data(), tq, part_l.data() + task * tq);
        continue;
      }
      for (int64_t r = 0; r < tq; ++r) {
        const int64_t t = t0 + r * query_step, head = h + r * head_step;
        float* orow = a.out + ((b * a.T + t) * a.Hq + head) * d;
        float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;
        for (int64_t c = 0; c < d; ++c) orow[c] = acc[r * d + c] * inv;
        if (a.lse) a.lse[(b * a.Hq + head) * a.T + t] = l[r] > 0 ? m[r] + std::log(l[r]) : INFINITY;
      }
    }
  });
  if (!heads_as_rows) return;
  parallel_for(a.B * a.Hkv, 1, [&](int64_t lo, int64_t hi) {
    std::vector<DecodePart> joined(static_cast<size_t>(ranges));
    for (int64_t i = lo; i < hi; ++i) {
      for (int64_t p = 0; p < ranges; ++p) {
        const int64_t task = i * ranges + p;
        joined[size_t(p)] = {part_acc.data() + task * group * d, part_m.data() + task * group,
                             part_l.data() + task * group};
      }
      const int64_t head = (i / a.Hkv) * a.Hq + (i % a.Hkv) * group;  // the group's first, T = 1
      join_decode_parts(joined.data(), ranges, group, d, a.out + head * d,
                        a.lse ? a.lse + head : nullptr);
    }
  });
}

// Tasks of the backward pass: every (batch row, kv head) is cut into `splits` ranges of query
// tiles so that small batches still give enough tasks; each task keeps its own dK/dV partial sums,
// added in split order afterwards. The cut depends on the shapes only, so results do not depend
// on the thread count.
constexpr int64_t kMinBackwardTasks = 16;

void attention_backward(const AttentionGradArgs& g) {
  const AttentionArgs& a = g.fwd;
  const int64_t group = a.Hq / a.Hkv, d = a.D;
  AttentionMask no_mask;
  const AttentionMask& mask = a.mask ? *a.mask : no_mask;
  const int64_t q_tiles = (a.T + kTileQ - 1) / kTileQ;
  const int64_t splits = std::clamp<int64_t>((kMinBackwardTasks + a.B * a.Hkv - 1) / (a.B * a.Hkv),
                                             1, std::max<int64_t>(q_tiles, 1));
  const int64_t tiles_per_split = (q_tiles + splits - 1) / splits;
  // [B * Hkv * splits, S, d] partial dK and dV of each task.
  std::vector<float> dk_part(size_t(a.B * a.Hkv * splits * a.S * d)), dv_part(dk_part.size());
  parallel_for(a.B * a.Hkv * splits, 1, [&](int64_t lo_task, int64_t hi_task) {
    std::vector<float> qbuf(kTileQ * d), dobuf(kTileQ * d), dqbuf(kTileQ * d), kbuf(kTileK * d),
        vbuf(kTileK * d), pbuf(kTileQ * kTileK), dpbuf(kTileQ * kTileK), drow(kTileQ);
    RowRanges rr;
    for (int64_t task = lo_task; task < hi_task; ++task) {
      int64_t b = task / (a.Hkv * splits), kvh = (task / splits) % a.Hkv, split = task % splits;
      float* dk_acc = dk_part.data() + task * a.S * d;
      float* dv_acc = dv_part.data() + task * a.S * d;
      std::fill_n(dk_acc, a.S * d, 0.0f);
      std::fill_n(dv_acc, a.S * d, 0.0f);
      const float* kbase = a.k + b * a.kv_batch_stride + kvh * d;
      const float* vbase = a.v + b * a.kv_batch_stride + kvh * d;
      const int64_t t_begin = split * tiles_per_split * kTileQ;
      const int64_t t_end = std::min(a.T, (split + 1) * tiles_per_split * kTileQ);
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (int64_t t0 = t_begin; t0 < t_end; t0 += kTileQ) {
          int64_t tq = std::min(kTileQ, a.T - t0);
          rr.compute(mask, b, t0, tq, a.S);
          int64_t row0 = (b * a.T + t0) * a.Hq + h;
          for (int64_t r = 0; r < tq; ++r) {  // D_r = dO_r . O_r
            const float* o = a.out + (row0 + r * a.Hq) * d;
            const float* dout = g.dout + (row0 + r * a.Hq) * d;
            float s = 0;
            for (int64_t c = 0; c < d; ++c) s += o[c] * dout[c];
            drow[r] = s;
          }
          if (rr.min_lo >= rr.max_hi) {
            for (int64_t r = 0; r < tq; ++r) std::fill_n(g.dq + (row0 + r * a.Hq) * d, d, 0.0f);
            continue;
          }
          gather_rows(a.q + b * a.q_batch_stride + (t0 * a.Hq + h) * d, a.Hq * d, tq, d,
                      qbuf.data());
          gather_rows(g.dout + row0 * d, a.Hq * d, tq, d, dobuf.data());
          std::fill_n(dqbuf.data(), tq * d, 0.0f);
          const float* lse = a.lse + (b * a.Hq + h) * a.T + t0;
          for (int64_t k0 = rr.min_lo; k0 < rr.max_hi; k0 += kTileK) {
            int64_t tk = std::min(kTileK, rr.max_hi - k0);
            gather_rows(kbase + k0 * a.Hkv * d, a.Hkv * d, tk, d, kbuf.data());
            gather_rows(vbase + k0 * a.Hkv * d, a.Hkv * d, tk, d, vbuf.data());
            MapMat Q(qbuf.data(), tq, d), dO(dobuf.data(), tq, d), K(kbuf.data(), tk, d),
                V(vbuf.data(), tk, d), P(pbuf.data(), tq, tk), dP(dpbuf.data(), tq, tk);
            P.noalias() = Q * K.transpose();
            for (int64_t r = 0; r < tq; ++r) {
              int64_t jlo = std::clamp<int64_t>(rr.lo[r] - k0, 0, tk);
              int64_t jhi = std::clamp<int64_t>(rr.hi[r] - k0, 0, tk);
              float* prow = pbuf.data() + r * tk;
              scale_in_place(prow, tk, a.scale);
              std::fill(prow, prow + std::max<int64_t>(jlo, 0), -INFINITY);  // masked: exp gives 0
              std::fill(prow + std::max(jlo, jhi), prow + tk, -INFINITY);
              exp_shifted(prow, lse[r], prow, tk);
            }
            MapMat(dv_acc + k0 * d, tk, d).noalias() += P.transpose() * dO;
            dP.noalias() = dO * V.transpose();
            for (int64_t r = 0; r < tq; ++r) {  // dS = P * (dP - D), scaled
              float* prow = pbuf.data() + r * tk;
              float* dprow = dpbuf.data() + r * tk;
              for (int64_t j = 0; j < tk; ++j) dprow[j] = prow[j] * (dprow[j] - drow[r]) * a.scale;
            }
            MapMat(dqbuf.data(), tq, d).noalias() += dP * K;
            MapMat(dk_acc + k0 * d, tk, d).noalias() += dP.transpose() * Q;
          }
          for (int64_t r = 0; r < tq; ++r)
            std::memcpy(g.dq + (row0 + r * a.Hq) * d, dqbuf.data() + r * d, size_t(d) * 4);
        }
      }
    }
  });
  // dK, dV: the partial sums of each (b, kv head) added in split order.
  parallel_for(a.B * a.Hkv, 1, [&](int64_t lo_task, int64_t hi_task) {
    for (int64_t bk = lo_task; bk < hi_task; ++bk) {
      const int64_t b = bk / a.Hkv, kvh = bk % a.Hkv;
      for (int64_t s = 0; s < a.S; ++s) {
        float* dk = g.dk + ((b * a.S + s) * a.Hkv + kvh) * d;
        float* dv = g.dv + ((b * a.S + s) * a.Hkv + kvh) * d;
        const float* pk = dk_part.data() + (bk * splits * a.S + s) * d;
        const float* pv = dv_part.data() + (bk * splits * a.S + s) * d;
        std::memcpy(dk, pk, size_t(d) * 4);
        std::memcpy(dv, pv, size_t(d) * 4);
        for (int64_t sp = 1; sp < splits; ++sp)
          for (int64_t c = 0; c < d; ++c) {
            dk[c] += pk[sp * a.S * d + c];
            dv[c] += pv[sp * a.S * d + c];
          }
      }
    }
  });
}

}  // namespace glm4::kernels
