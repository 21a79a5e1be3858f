#include "autograd/kernels/attention.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/parallel.h"

namespace glm4::kernels {

namespace {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapMat = Eigen::Map<RowMat>;
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
}  // namespace

void attention_forward(const AttentionArgs& a) {
  const int64_t group = a.Hq / a.Hkv, d = a.D;
  const int64_t q_tiles = (a.T + kTileQ - 1) / kTileQ;
  AttentionMask no_mask;
  const AttentionMask& mask = a.mask ? *a.mask : no_mask;
  parallel_for(a.B * a.Hq * q_tiles, 1, [&](int64_t lo_task, int64_t hi_task) {
    std::vector<float> qbuf(kTileQ * d), kbuf(kTileK * d), vbuf(kTileK * d), sbuf(kTileQ * kTileK),
        acc(kTileQ * d), m(kTileQ), l(kTileQ);
    RowRanges rr;
    for (int64_t task = lo_task; task < hi_task; ++task) {
      int64_t b = task / (a.Hq * q_tiles), h = (task / q_tiles) % a.Hq, t0 = (task % q_tiles) * kTileQ;
      int64_t kvh = h / group, tq = std::min(kTileQ, a.T - t0);
      rr.compute(mask, b, t0, tq, a.S);
      const float* qsrc = a.q + b * a.q_batch_stride + (t0 * a.Hq + h) * d;
      gather_rows(qsrc, a.Hq * d, tq, d, qbuf.data());
      for (int64_t i = 0; i < tq * d; ++i) qbuf[i] *= a.scale;
      std::fill_n(acc.data(), tq * d, 0.0f);
      std::fill_n(m.data(), tq, -INFINITY);
      std::fill_n(l.data(), tq, 0.0f);
      const float* kbase = a.k + b * a.kv_batch_stride + kvh * d;
      const float* vbase = a.v + b * a.kv_batch_stride + kvh * d;
      for (int64_t k0 = rr.min_lo; k0 < rr.max_hi; k0 += kTileK) {
        int64_t tk = std::min(kTileK, rr.max_hi - k0);
        gather_rows(kbase + k0 * a.Hkv * d, a.Hkv * d, tk, d, kbuf.data());
        gather_rows(vbase + k0 * a.Hkv * d, a.Hkv * d, tk, d, vbuf.data());
        MapMat S(sbuf.data(), tq, tk);
        S.noalias() = MapMat(qbuf.data(), tq, d) * MapMat(kbuf.data(), tk, d).transpose();
        for (int64_t r = 0; r < tq; ++r) {
          float* srow = sbuf.data() + r * tk;
          int64_t jlo = std::clamp<int64_t>(rr.lo[r] - k0, 0, tk);
          int64_t jhi = std::clamp<int64_t>(rr.hi[r] - k0, 0, tk);
          float row_max = -INFINITY;
          for (int64_t j = jlo; j < jhi; ++j) row_max = std::max(row_max, srow[j]);
          if (jlo >= jhi) {
            std::fill_n(srow, tk, 0.0f);
            continue;
          }
          float new_m = std::max(m[r], row_max);
          float alpha = std::exp(m[r] - new_m);
          float sum = 0;
          for (int64_t j = 0; j < tk; ++j) {
            float p = (j >= jlo && j < jhi) ? std::exp(srow[j] - new_m) : 0.0f;
            srow[j] = p;
            sum += p;
          }
          l[r] = l[r] * alpha + sum;
          m[r] = new_m;
          float* arow = acc.data() + r * d;
          for (int64_t c = 0; c < d; ++c) arow[c] *= alpha;
        }
        MapMat(acc.data(), tq, d).noalias() += S * MapMat(vbuf.data(), tk, d);
      }
      for (int64_t r = 0; r < tq; ++r) {
        float* orow = a.out + ((b * a.T + t0 + r) * a.Hq + h) * d;
        float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;
        for (int64_t c = 0; c < d; ++c) orow[c] = acc[r * d + c] * inv;
        if (a.lse) a.lse[(b * a.Hq + h) * a.T + t0 + r] = l[r] > 0 ? m[r] + std::log(l[r]) : INFINITY;
      }
    }
  });
}

void attention_backward(const AttentionGradArgs& g) {
  const AttentionArgs& a = g.fwd;
  const int64_t group = a.Hq / a.Hkv, d = a.D;
  AttentionMask no_mask;
  const AttentionMask& mask = a.mask ? *a.mask : no_mask;
  parallel_for(a.B * a.Hkv, 1, [&](int64_t lo_task, int64_t hi_task) {
    std::vector<float> qbuf(kTileQ * d), dobuf(kTileQ * d), dqbuf(kTileQ * d), kbuf(kTileK * d),
        vbuf(kTileK * d), pbuf(kTileQ * kTileK), dpbuf(kTileQ * kTileK), drow(kTileQ);
    std::vector<float> dk_acc(size_t(a.S * d)), dv_acc(size_t(a.S * d));
    RowRanges rr;
    for (int64_t task = lo_task; task < hi_task; ++task) {
      int64_t b = task / a.Hkv, kvh = task % a.Hkv;
      std::fill(dk_acc.begin(), dk_acc.end(), 0.0f);
      std::fill(dv_acc.begin(), dv_acc.end(), 0.0f);
      const float* kbase = a.k + b * a.kv_batch_stride + kvh * d;
      const float* vbase = a.v + b * a.kv_batch_stride + kvh * d;
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (int64_t t0 = 0; t0 < a.T; t0 += kTileQ) {
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
          gather_rows(a.q + b * a.q_batch_stride + (t0 * a.Hq + h) * d, a.Hq * d, tq, d, qbuf.data());
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
              for (int64_t j = 0; j < tk; ++j)
                prow[j] = (j >= jlo && j < jhi) ? std::exp(prow[j] * a.scale - lse[r]) : 0.0f;
            }
            MapMat(dv_acc.data() + k0 * d, tk, d).noalias() += P.transpose() * dO;
            dP.noalias() = dO * V.transpose();
            for (int64_t r = 0; r < tq; ++r) {  // dS = P * (dP - D), scaled
              float* prow = pbuf.data() + r * tk;
              float* dprow = dpbuf.data() + r * tk;
              for (int64_t j = 0; j < tk; ++j) dprow[j] = prow[j] * (dprow[j] - drow[r]) * a.scale;
            }
            MapMat(dqbuf.data(), tq, d).noalias() += dP * K;
            MapMat(dk_acc.data() + k0 * d, tk, d).noalias() += dP.transpose() * Q;
          }
          for (int64_t r = 0; r < tq; ++r)
            std::memcpy(g.dq + (row0 + r * a.Hq) * d, dqbuf.data() + r * d, size_t(d) * 4);
        }
      }
      for (int64_t s = 0; s < a.S; ++s) {
        std::memcpy(g.dk + ((b * a.S + s) * a.Hkv + kvh) * d, dk_acc.data() + s * d, size_t(d) * 4);
        std::memcpy(g.dv + ((b * a.S + s) * a.Hkv + kvh) * d, dv_acc.data() + s * d, size_t(d) * 4);
      }
    }
  });
}

}  // namespace glm4::kernels
