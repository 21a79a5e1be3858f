// The latent-space form of glm4_moe_lite's attention for cached inference. kv_b_proj stays in its
// stored form: each head's key half folds the query through the decode kernels' input-gradient
// product (a weighted sum of the stored rows), the scores and the attended latents read each
// cached token once for all heads (one query: the decode attention kernel over ranges of the cache
// in parallel; a few: vector loops; longer chunks: GEMMs), and the value halves of every head run
// as decode products in one parallel loop.
#include "model/mla_latent_decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "autograd/kernels/attention_decode.h"
#include "autograd/kernels/gemm.h"
#include "autograd/kernels/linear_batch.h"
#include "autograd/kernels/simd.h"
#include "base/check.h"
#include "base/parallel.h"

namespace glm4 {

namespace {

// kv_b as the kernels read it: the frozen weight, or a view of the fp32 value.
Weight stored(const Param& w) {
  if (!w.value.defined()) return w.frozen;
  return Weight::view(DType::F32, w.value.data(), w.shape[0], w.shape[1], nullptr);
}

// Rows [first, first + n) of w, a view in the same storage (w outlives it).
Weight row_range(const Weight& w, int64_t first, int64_t n) {
  if (!w.is_quantized()) {
    const auto* base = static_cast<const uint8_t*>(w.data());
    return Weight::view(w.dtype(), base + size_t(first * w.cols()) * dtype_size(w.dtype()), n,
                        w.cols(), nullptr);
  }
  QuantizedMatrix q = w.quant();
  const size_t params = size_t(first * q.groups()) * dtype_size(q.scale_dtype);
  q.packed = q.row(first);
  q.scales = static_cast<const uint8_t*>(q.scales) + params;
  q.biases = static_cast<const uint8_t*>(q.biases) + params;
  q.rows = n;
  return Weight::quantized_view(q, nullptr);
}

// Query rows (heads x queries) up to which the scores and attended latents of a chunk of queries
// stream the cache in plain vector loops: a GEMM packs the cache first, which costs more than it
// saves for few rows.
constexpr int64_t kStreamRows = 64;
constexpr int64_t kTokenBlock = 32;   // cached tokens a score task takes
constexpr int64_t kColumnBlock = 64;  // latent columns an attended-latent task takes

// The cache's values widened to fp32: kLanes of them, or one.
inline simd::VecF load_key(const float* p) { return simd::load(p); }
inline simd::VecF load_key(const uint16_t* p) { return simd::load(p, DType::BF16); }
inline float key_at(const float* p) { return *p; }
inline float key_at(const uint16_t* p) { return bf16_to_f32(*p); }

// sum_i a[i] b[i], in vector lanes (a plain loop's serial sum does not vectorise).
template <typename K>
float dot(const float* a, const K* b, int64_t n) {
  simd::VecF acc = simd::zero();
  int64_t i = 0;
  for (; i + simd::kLanes <= n; i += simd::kLanes)
    acc = simd::fma(simd::load(a + i), load_key(b + i), acc);
  float s = simd::hsum(acc);
  for (; i < n; ++i) s += a[i] * key_at(b + i);
  return s;
}

// Four dot products of a with b0..b3 over n, as independent chains (one chain waits on each fma).
template <typename K>
void dot4(const float* a, const K* const b[4], int64_t n, float out[4]) {
  simd::VecF acc[4] = {simd::zero(), simd::zero(), simd::zero(), simd::zero()};
  int64_t i = 0;
  for (; i + simd::kLanes <= n; i += simd::kLanes) {
    const simd::VecF x = simd::load(a + i);
    for (int k = 0; k < 4; ++k) acc[k] = simd::fma(x, load_key(b[k] + i), acc[k]);
  }
  for (int k = 0; k < 4; ++k) {
    out[k] = simd::hsum(acc[k]);
    for (int64_t t = i; t < n; ++t) out[k] += a[t] * key_at(b[k] + t);
  }
}

// p[r, j] = alpha (q_lat[r] . latent_j + q_rope[r] . k_rot_j) for j < S: the cache is read in
// blocks of tokens that stay in L1 while every row reads them, each block once for all rows.
template <typename K>
void stream_scores(const float* q_lat, const float* q_rope, int64_t rows, const K* cache, int64_t S,
                   int64_t C, int64_t R, float alpha, float* p) {
  const int64_t W = C + R;
  parallel_for(S, kTokenBlock, [&](int64_t j0, int64_t j1) {
    for (int64_t r = 0; r < rows; ++r) {
      int64_t j = j0;
      for (; j + 4 <= j1; j += 4) {
        const K* k[4] = {cache + j * W, cache + (j + 1) * W, cache + (j + 2) * W,
                         cache + (j + 3) * W};
        const K* k_rot[4] = {k[0] + C, k[1] + C, k[2] + C, k[3] + C};
        float lat[4], rot[4];
        dot4(q_lat + r * C, k, C, lat);
        dot4(q_rope + r * R, k_rot, R, rot);
        for (int t = 0; t < 4; ++t) p[r * S + j + t] = alpha * (lat[t] + rot[t]);
      }
      for (; j < j1; ++j)
        p[r * S + j] = alpha * (dot(q_lat + r * C, cache + j * W, C) +
                                dot(q_rope + r * R, cache + j * W + C, R));
    }
  });
}

// o[r, :] = sum_j p[r, j] latent_j, summed over j in order; tasks split the latent's columns
// (kColumnBlock of them in registers, one chain a vector) and take the cache in blocks of tokens
// that stay in L1 while every row reads them.
template <typename K>
void stream_attended(const float* p, int64_t rows, const K* cache, int64_t S, int64_t C, int64_t R,
                     float* o) {
  constexpr int kVecs = int(kColumnBlock / simd::kLanes);
  const int64_t W = C + R, blocks = (C + kColumnBlock - 1) / kColumnBlock;
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t c0 = b * kColumnBlock, c1 = std::min(C, c0 + kColumnBlock);
      for (int64_t r = 0; r < rows; ++r) std::fill(o + r * C + c0, o + r * C + c1, 0.0f);
      for (int64_t j0 = 0; j0 < S; j0 += kTokenBlock) {
        const int64_t j1 = std::min(S, j0 + kTokenBlock);
        for (int64_t r = 0; r < rows; ++r) {
          float* orow = o + r * C;
          const float* prow = p + r * S;
          if (c1 - c0 < kColumnBlock) {  // the last, narrower block
            for (int64_t j = j0; j < j1; ++j)
              for (int64_t c = c0; c < c1; ++c) orow[c] += prow[j] * key_at(cache + j * W + c);
            continue;
          }
          simd::VecF acc[kVecs];
          for (int v = 0; v < kVecs; ++v) acc[v] = simd::load(orow + c0 + v * simd::kLanes);
          for (int64_t j = j0; j < j1; ++j) {
            const simd::VecF pj = simd::set1(prow[j]);
            const K* k = cache + j * W + c0;
            for (int v = 0; v < kVecs; ++v)
              acc[v] = simd::fma(pj, load_key(k + v * simd::kLanes), acc[v]);
          }
          for (int v = 0; v < kVecs; ++v) simd::store(orow + c0 + v * simd::kLanes, acc[v]);
        }
      }
    }
  });
}

// Each row of p [rows, S] (the first `visible(row)` entries are scores) made its softmax, zeros
// past.
template <typename Visible>
void softmax_rows(float* p, int64_t rows, int64_t S, Visible&& visible) {
  parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, S)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t r = lo; r < hi; ++r) {
                   float* row = p + r * S;
                   const int64_t n = visible(r);
                   float best = -std::numeric_limits<float>::infinity();
                   for (int64_t j = 0; j < n; ++j) best = std::max(best, row[j]);
                   float total = 0.0f;
                   for (int64_t j = 0; j < n; ++j) total += row[j] = std::exp(row[j] - best);
                   const float inv = 1.0f / total;
                   for (int64_t j = 0; j < n; ++j) row[j] *= inv;
                   std::fill(row + n, row + S, 0.0f);
                 }
               });
}

// One query's heads (decode): o[h] = the attended latents of head h over the first S cached
// tokens, by the decode attention kernel (each head's query is its absorbed latent query and its
// rotary part, scaled; the keys are the cached rows, the values their latents), the cache cut into
// ranges taken in parallel and joined in order: 256 tokens, 64 below 1,024 so that short contexts
// still give each thread some (the cut follows S alone: the same sums on any thread count).
int64_t decode_part_tokens(int64_t S) { return S >= 1024 ? 256 : 64; }
// Below kEnoughParts ranges of the cache (contexts under 256 tokens), the heads are cut into
// blocks too, so that both threads get work. A block is a multiple of 4 heads: the kernel takes
// rows 4 at a time, so each head's sums are those of one call over all heads.
constexpr int64_t kEnoughParts = 4;
constexpr int64_t kHeadBlock = 8;
static_assert(kHeadBlock % 4 == 0);

void decode_latents(const float* q_lat, const float* q_rope, int64_t H, const float* cache,
                    const uint16_t* cache16, int64_t S, int64_t C, int64_t R, float scale,
                    float* o) {
  const int64_t W = C + R, part_tokens = decode_part_tokens(S);
  const int64_t parts = (S + part_tokens - 1) / part_tokens;
  std::vector<float> q(size_t(H * W)), acc(size_t(parts * H * C)), m(size_t(parts * H)),
      l(size_t(parts * H));
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t c = 0; c < C; ++c) q[size_t(h * W + c)] = scale * q_lat[h * C + c];
    for (int64_t r = 0; r < R; ++r) q[size_t(h * W + C + r)] = scale * q_rope[h * R + r];
  }
  kernels::DecodeKeys keys;
  keys.k = keys.v = cache;
  keys.k16 = keys.v16 = cache16;
  keys.stride = W;
  keys.d = W;
  keys.dv = C;
  std::vector<kernels::DecodePart> part(static_cast<size_t>(parts));
  for (int64_t i = 0; i < parts; ++i)
    part[size_t(i)] = {acc.data() + i * H * C, m.data() + i * H, l.data() + i * H};
  const int64_t head_block = parts >= kEnoughParts ? H : std::min(H, kHeadBlock);
  const int64_t head_blocks = (H + head_block - 1) / head_block;
  parallel_for(parts * head_blocks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i = t / head_blocks, h0 = t % head_blocks * head_block;
      const kernels::DecodePart& whole = part[size_t(i)];
      kernels::attention_decode_rows(q.data() + h0 * W, std::min(head_block, H - h0), keys,
                                     i * part_tokens, std::min(S, (i + 1) * part_tokens),
                                     {whole.acc + h0 * C, whole.m + h0, whole.l + h0});
    }
  });
  kernels::join_decode_parts(part.data(), parts, H, C, o);
}

}  // namespace

Tensor latent_attention(const Tensor& q, const Tensor& cached, const Param& kv_b,
                        const LatentShape& s, const ComputeChoice& compute, int64_t score_budget) {
  GLM4_CHECK(cached.rank() == 4 && cached.dim(0) == 1 && cached.dim(2) == 1,
             "[mla] latent attention: cache ", shape_str(cached.shape()));
  CachedTokens keys;
  keys.f32 = cached;
  keys.tokens = cached.dim(1);
  keys.width = cached.dim(3);
  return latent_attention(q, keys, kv_b, s, compute, score_budget);
}

Tensor latent_attention(const Tensor& q, const CachedTokens& cached, const Param& kv_b,
                        const LatentShape& s, const ComputeChoice& compute, int64_t score_budget) {
  const int64_t H = s.heads, C = s.kv_lora_rank, N = s.nope_dim, R = s.rope_dim, V = s.v_dim;
  const int64_t T = q.dim(1), S = cached.tokens, W = C + R;
  GLM4_CHECK(q.rank() == 4 && q.dim(0) == 1 && q.dim(2) == H && q.dim(3) == N + R &&
                 cached.width == W && S >= T && kv_b.shape == Shape({H * (N + V), C}),
             "[mla] latent attention: q ", shape_str(q.shape()), ", cache of ", S, " x ",
             cached.width, ", kv_b_proj ", shape_str(kv_b.shape));
  Tensor out = Tensor::empty({1, T, H, V});
  if (T == 0) return out;
  const Weight kv = stored(kv_b);
  std::vector<Weight> w_k, w_v;  // per head: the key half [N, C] and the value half [V, C]
  w_k.reserve(size_t(H));
  w_v.reserve(size_t(H));
  for (int64_t h = 0; h < H; ++h) {
    w_k.push_back(row_range(kv, h * (N + V), N));
    w_v.push_back(row_range(kv, h * (N + V) + N, V));
  }
  const float scale = float(s.score_mscale / std::sqrt(double(N + R)));
  const float* qd = q.data();
  const float* cd = cached.bf16 ? nullptr : cached.f32.data();
  const uint16_t* cd16 = cached.bf16;
  Tensor widened;  // a bf16 cache as the GEMMs of long chunks read it, widened once
  const int64_t block = std::clamp<int64_t>(score_budget / (H * S), 1, T);
  std::vector<float> q_nope, q_lat, q_rope, p, o_lat, o_v;
  for (int64_t t0 = 0; t0 < T; t0 += block) {
    const int64_t B = std::min(block, T - t0), rows = H * B;
    const int64_t seen = S - T + t0 + B;  // cached tokens the block's last query sees
    q_nope.resize(size_t(rows * N));      // [H, B, N]
    q_lat.resize(size_t(rows * C));       // [H, B, C]
    q_rope.resize(size_t(rows * R));      // [H, B, R]
    for (int64_t h = 0; h < H; ++h)
      for (int64_t b = 0; b < B; ++b) {
        const float* qt = qd + ((t0 + b) * H + h) * (N + R);
        std::copy(qt, qt + N, q_nope.data() + (h * B + b) * N);
        std::copy(qt + N, qt + N + R, q_rope.data() + (h * B + b) * R);
      }
    // the absorbed queries: q_nope(h) W_k(h), a weighted sum of the stored key rows, in fp32
    parallel_for(H, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t h = lo; h < hi; ++h)
        linear_input_grad(q_nope.data() + h * B * N, B, N, w_k[size_t(h)], q_lat.data() + h * B * C,
                          false, kF32Compute);
    });
    o_lat.resize(size_t(rows * C));  // [H, B, C]: the attended latents
    if (B == 1 && H <= kernels::kDecodeMaxRows && kernels::attention_decode_available()) {
      decode_latents(q_lat.data(), q_rope.data(), H, cd, cd16, seen, C, R, scale, o_lat.data());
    } else {
      // scores of every head against the cache in one pass: [H * B, seen]
      const bool stream = rows <= kStreamRows;
      p.resize(size_t(rows * seen));
      if (!stream && cd16 && !widened.defined()) widened = cached.to_f32();
      const float* wide = widened.defined() ? widened.data() : cd;
      if (stream && cd16) {
        stream_scores(q_lat.data(), q_rope.data(), rows, cd16, seen, C, R, scale, p.data());
      } else if (stream) {
        stream_scores(q_lat.data(), q_rope.data(), rows, cd, seen, C, R, scale, p.data());
      } else {
        sgemm(false, true, rows, seen, C, scale, q_lat.data(), C, wide, W, 0.0f, p.data(), seen);
        sgemm(false, true, rows, seen, R, scale, q_rope.data(), R, wide + C, W, 1.0f, p.data(),
              seen);
      }
      softmax_rows(p.data(), rows, seen, [&](int64_t r) { return S - T + t0 + r % B + 1; });
      if (stream && cd16)
        stream_attended(p.data(), rows, cd16, seen, C, R, o_lat.data());
      else if (stream)
        stream_attended(p.data(), rows, cd, seen, C, R, o_lat.data());
      else
        sgemm(false, false, rows, C, seen, 1.0f, p.data(), seen, wide, W, 0.0f, o_lat.data(), C);
    }
    // the value halves, every head's product in one parallel loop: [H, B, V]
    o_v.resize(size_t(rows * V));
    std::vector<LinearProduct> products;
    for (int64_t h = 0; h < H; ++h)
      products.push_back({o_lat.data() + h * B * C, B, &w_v[size_t(h)], o_v.data() + h * B * V});
    linear_forward_batch(products, compute);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t b = 0; b < B; ++b)
        std::memcpy(out.data() + ((t0 + b) * H + h) * V, o_v.data() + (h * B + b) * V,
                    size_t(V) * sizeof(float));
  }
  return out;
}

}  // namespace glm4
