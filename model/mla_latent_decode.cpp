// The latent-space form of glm4_moe_lite's attention for cached inference: plain loops over
// heads (in parallel) and tokens, kv_b_proj's rows widened one head at a time.
#include "model/mla_latent_decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "autograd/kernels/simd.h"
#include "base/check.h"
#include "base/parallel.h"

namespace glm4 {

namespace {
// sum_i a[i] b[i], in vector lanes (a plain loop's serial sum does not vectorise).
float dot(const float* a, const float* b, int64_t n) {
  simd::VecF acc = simd::zero();
  int64_t i = 0;
  for (; i + simd::kLanes <= n; i += simd::kLanes)
    acc = simd::fma(simd::load(a + i), simd::load(b + i), acc);
  float s = simd::hsum(acc);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Rows [first, first + n) of kv_b, widened to fp32: out [n, cols].
void rows_f32(const Param& w, int64_t first, int64_t n, float* out) {
  const int64_t cols = w.shape[1];
  if (w.value.defined()) {
    std::memcpy(out, w.value.data() + first * cols, size_t(n * cols) * sizeof(float));
    return;
  }
  for (int64_t r = 0; r < n; ++r) w.frozen.row_to_f32(first + r, out + r * cols);
}
}  // namespace

Tensor latent_attention(const Tensor& q, const Tensor& cached, const Param& kv_b,
                        const LatentShape& s) {
  const int64_t H = s.heads, C = s.kv_lora_rank, N = s.nope_dim, R = s.rope_dim, V = s.v_dim;
  const int64_t T = q.dim(1), S = cached.dim(1), W = C + R;
  GLM4_CHECK(q.rank() == 4 && q.dim(0) == 1 && q.dim(2) == H && q.dim(3) == N + R &&
                 cached.rank() == 4 && cached.dim(0) == 1 && cached.dim(2) == 1 &&
                 cached.dim(3) == W && S >= T && kv_b.shape == Shape({H * (N + V), C}),
             "[mla] latent attention: q ", shape_str(q.shape()), ", cache ",
             shape_str(cached.shape()), ", kv_b_proj ", shape_str(kv_b.shape));
  Tensor out = Tensor::zeros({1, T, H, V});
  const float scale = float(1.0 / std::sqrt(double(N + R)));
  const float* qd = q.data();
  const float* cd = cached.data();
  float* od = out.data();
  parallel_for(H, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> wk(static_cast<size_t>(N * C)), wv(static_cast<size_t>(V * C));
    std::vector<float> q_lat(static_cast<size_t>(C)), o_lat(static_cast<size_t>(C));
    std::vector<float> p(static_cast<size_t>(S));
    for (int64_t h = lo; h < hi; ++h) {
      rows_f32(kv_b, h * (N + V), N, wk.data());      // [N, C]: the key half of head h
      rows_f32(kv_b, h * (N + V) + N, V, wv.data());  // [V, C]: the value half
      for (int64_t t = 0; t < T; ++t) {
        const float* qt = qd + (t * H + h) * (N + R);
        std::fill(q_lat.begin(), q_lat.end(), 0.0f);
        for (int64_t n = 0; n < N; ++n) {
          const float qn = qt[n];
          const float* row = wk.data() + n * C;
          for (int64_t c = 0; c < C; ++c) q_lat[size_t(c)] += qn * row[c];
        }
        const int64_t visible = S - T + t + 1;  // causal: the cache up to this token
        float best = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < visible; ++j) {
          const float* kj = cd + j * W;
          p[size_t(j)] = (dot(q_lat.data(), kj, C) + dot(qt + N, kj + C, R)) * scale;
          best = std::max(best, p[size_t(j)]);
        }
        float total = 0.0f;
        for (int64_t j = 0; j < visible; ++j) total += p[size_t(j)] = std::exp(p[size_t(j)] - best);
        std::fill(o_lat.begin(), o_lat.end(), 0.0f);
        for (int64_t j = 0; j < visible; ++j) {
          const float pj = p[size_t(j)] / total;
          const float* kj = cd + j * W;
          for (int64_t c = 0; c < C; ++c) o_lat[size_t(c)] += pj * kj[c];
        }
        float* ot = od + (t * H + h) * V;
        for (int64_t v = 0; v < V; ++v) {
          const float* row = wv.data() + v * C;
          ot[v] = dot(o_lat.data(), row, C);
        }
      }
    }
  });
  return out;
}

}  // namespace glm4
