// The latent-space attention kernel (model/mla_latent_decode.h) against the expanded form in
// double precision, for kv_b_proj stored fp32 (trainable value or frozen), bf16, 4-bit and 8-bit,
// under fp32 and bf16 compute, one query or a chunk (streamed or as GEMMs), in one block of
// queries or several.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "autograd/kernels/kernel_selection.h"
#include "autograd/weight_quantize.h"
#include "base/check.h"
#include "base/dtype.h"
#include "model/kv_cache.h"
#include "model/mla_latent_decode.h"

namespace glm4 {
namespace {

constexpr LatentShape kShape{3, 128, 32, 16, 64};  // heads, kv_lora, nope, rope, v

Tensor random_tensor(const Shape& shape, std::mt19937& rng, float sd) {
  std::normal_distribution<float> normal(0.0f, sd);
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = normal(rng);
  return t;
}

// kv_b [H * (nope + v), kv_lora] held as `form`: "value" (fp32, trainable), "f32", "bf16", "q4",
// "q8" (frozen).
Param kv_b_as(const std::string& form, std::mt19937& rng) {
  const LatentShape s = kShape;
  Param p;
  p.shape = {s.heads * (s.nope_dim + s.v_dim), s.kv_lora_rank};
  const Tensor w = random_tensor(p.shape, rng, 0.1f);
  if (form == "value") {
    p.value = w;
    return p;
  }
  if (form == "f32" || form == "bf16") {
    p.frozen = Weight::from_f32(w.data(), p.shape[0], p.shape[1],
                                form == "f32" ? DType::F32 : DType::BF16);
    return p;
  }
  const Weight bf16 = Weight::from_f32(w.data(), p.shape[0], p.shape[1], DType::BF16);
  p.frozen = quantize_weight(bf16, {form == "q4" ? 4 : 8, 64}, DType::BF16, "kv_b_proj");
  return p;
}

// The expanded form in double: per-head keys and values rebuilt from each cached latent through
// kv_b's values, causal softmax, weighted sum. -> [T, H, v].
std::vector<double> expanded_reference(const Tensor& q, const Tensor& cached, const Param& kv_b) {
  const LatentShape s = kShape;
  const int64_t H = s.heads, C = s.kv_lora_rank, N = s.nope_dim, R = s.rope_dim, V = s.v_dim;
  const int64_t T = q.dim(1), S = cached.dim(1), W = C + R;
  const std::vector<float> kv = kv_b.to_f32().to_vector();
  const float* qd = q.data();
  const float* cd = cached.data();
  std::vector<double> keys(size_t(S * H * N)), values(size_t(S * H * V)), out(size_t(T * H * V));
  for (int64_t j = 0; j < S; ++j)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t o = 0; o < N + V; ++o) {
        double sum = 0;
        for (int64_t c = 0; c < C; ++c)
          sum += double(kv[size_t((h * (N + V) + o) * C + c)]) * cd[j * W + c];
        if (o < N)
          keys[size_t((j * H + h) * N + o)] = sum;
        else
          values[size_t((j * H + h) * V + o - N)] = sum;
      }
  const double scale = 1.0 / std::sqrt(double(N + R));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float* qt = qd + (t * H + h) * (N + R);
      const int64_t visible = S - T + t + 1;
      std::vector<double> p(static_cast<size_t>(visible));
      double best = -1e300, total = 0;
      for (int64_t j = 0; j < visible; ++j) {
        double dot = 0;
        for (int64_t n = 0; n < N; ++n) dot += qt[n] * keys[size_t((j * H + h) * N + n)];
        for (int64_t r = 0; r < R; ++r) dot += double(qt[N + r]) * cd[j * W + C + r];
        p[size_t(j)] = dot * scale;
        best = std::max(best, p[size_t(j)]);
      }
      for (double& x : p) total += x = std::exp(x - best);
      for (int64_t v = 0; v < V; ++v) {
        double sum = 0;
        for (int64_t j = 0; j < visible; ++j)
          sum += p[size_t(j)] / total * values[size_t((j * H + h) * V + v)];
        out[size_t((t * H + h) * V + v)] = sum;
      }
    }
  return out;
}

struct Case {
  std::string form;  // kv_b's storage
  bool bf16;         // bf16 compute (skipped where the CPU has no bf16 dot products)
};

class LatentDecode : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (GetParam().bf16 && kernels::bf16_kernel() == kernels::Bf16Kernel::kNone)
      GTEST_SKIP() << "no bf16 dot products on this CPU";
  }
};

// The worst |latent - expanded| over the largest |expanded|, for T queries after S - T cached
// tokens.
double worst_relative(const Case& c, int64_t T, int64_t S, int64_t score_budget) {
  std::mt19937 rng(7);
  const LatentShape s = kShape;
  const Param kv_b = kv_b_as(c.form, rng);
  const Tensor q = random_tensor({1, T, s.heads, s.nope_dim + s.rope_dim}, rng, 1.0f);
  const Tensor cached = random_tensor({1, S, 1, s.kv_lora_rank + s.rope_dim}, rng, 1.0f);
  const ComputeChoice compute = c.bf16 ? bf16_compute(kernels::bf16_kernel()) : kF32Compute;
  const std::vector<float> got =
      latent_attention(q, cached, kv_b, s, compute, score_budget).to_vector();
  const std::vector<double> want = expanded_reference(q, cached, kv_b);
  EXPECT_EQ(got.size(), want.size());
  double worst = 0, largest = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(double(got[i]) - want[i]));
    largest = std::max(largest, std::abs(want[i]));
  }
  EXPECT_GT(largest, 0.01);
  return worst / largest;
}

// fp32 compute is fp32 arithmetic on the stored values; bf16 compute rounds the attended latent
// to bf16 (bf16 weights) or to two int8 levels (4- and 8-bit weights) for the value half.
double tolerance(const Case& c) { return c.bf16 ? 1e-2 : 2e-6; }

TEST_P(LatentDecode, OneQueryEqualsTheExpandedForm) {
  const Case c = GetParam();
  EXPECT_LE(worst_relative(c, 1, 41, kLatentScoreBudget), tolerance(c));
}

// Past several key tiles and ranges of the decode kernel (601 = 9 x 64 + 25 cached tokens; 1,100 =
// 4 x 256 + 76).
TEST_P(LatentDecode, OneQueryAfterManyCachedTokensEqualsTheExpandedForm) {
  const Case c = GetParam();
  EXPECT_LE(worst_relative(c, 1, 601, kLatentScoreBudget), tolerance(c));
  EXPECT_LE(worst_relative(c, 1, 1100, kLatentScoreBudget), tolerance(c));
}

TEST_P(LatentDecode, ChunkOfQueriesEqualsTheExpandedFormCausally) {
  const Case c = GetParam();
  EXPECT_LE(worst_relative(c, 7, 20, kLatentScoreBudget), tolerance(c));
}

// 24 queries of 3 heads are 72 query rows: past the streaming loops, the scores are GEMMs.
TEST_P(LatentDecode, LongChunkEqualsTheExpandedForm) {
  const Case c = GetParam();
  EXPECT_LE(worst_relative(c, 24, 30, kLatentScoreBudget), tolerance(c));
}

// A score budget of 2 * heads * cache entries splits the 7 queries into blocks of 2, 2, 2, 1.
TEST_P(LatentDecode, BlocksOfQueriesEqualTheExpandedForm) {
  const Case c = GetParam();
  EXPECT_LE(worst_relative(c, 7, 20, 2 * kShape.heads * 20), tolerance(c));
}

INSTANTIATE_TEST_SUITE_P(Storage, LatentDecode,
                         ::testing::Values(Case{"value", false}, Case{"f32", false},
                                           Case{"bf16", false}, Case{"q4", false},
                                           Case{"q8", false}, Case{"bf16", true}, Case{"q4", true},
                                           Case{"q8", true}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.form + (info.param.bf16 ? "_bf16" : "_f32");
                         });

// A bf16 cache (--kv-cache bf16) is read as the fp32 form of its rounded values, in the same
// order: the same bits as an fp32 cache of those values, for one query and a chunk (streamed) and
// for a long chunk (GEMMs over the widened cache); and it did round.
TEST(LatentDecode, ABf16CacheIsTheFp32CacheOfItsRoundedValues) {
  const LatentShape s = kShape;
  const int64_t W = s.kv_lora_rank + s.rope_dim;
  for (const int64_t T : {1, 7, 24}) {
    std::mt19937 rng(11);
    const Param kv_b = kv_b_as("q4", rng);
    const int64_t S = T + 33;
    const Tensor q = random_tensor({1, T, s.heads, s.nope_dim + s.rope_dim}, rng, 1.0f);
    const Tensor values = random_tensor({S, 1, W}, rng, 1.0f);
    KvCache cache(1, 1, W, 16, true, DType::BF16);
    cache.begin(S);
    const CachedTokens bf16 = cache.append_keys(0, values);
    Tensor rounded = Tensor::empty({1, S, 1, W});
    for (int64_t i = 0; i < S * W; ++i)
      rounded.data()[i] = bf16_to_f32(f32_to_bf16(values.data()[i]));
    const std::vector<float> got = latent_attention(q, bf16, kv_b, s, kF32Compute).to_vector();
    EXPECT_EQ(got, latent_attention(q, rounded, kv_b, s, kF32Compute).to_vector()) << T;
    const Tensor exact = Tensor::from({1, S, 1, W}, values.to_vector());
    EXPECT_NE(got, latent_attention(q, exact, kv_b, s, kF32Compute).to_vector()) << T;
  }
}

TEST(LatentDecode, RejectsAMismatchedKvB) {
  std::mt19937 rng(1);
  const LatentShape s = kShape;
  Param kv_b;
  kv_b.shape = {s.heads * (s.nope_dim + s.v_dim) + 1, s.kv_lora_rank};
  kv_b.value = Tensor::zeros(kv_b.shape);
  const Tensor q = random_tensor({1, 1, s.heads, s.nope_dim + s.rope_dim}, rng, 1.0f);
  const Tensor cached = random_tensor({1, 4, 1, s.kv_lora_rank + s.rope_dim}, rng, 1.0f);
  EXPECT_THROW(latent_attention(q, cached, kv_b, s, kF32Compute), Error);
}

}  // namespace
}  // namespace glm4
