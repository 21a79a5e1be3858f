// Attention on the bf16 units (inference under --compute bf16, attention_tiles_bf16.h): within
// bf16's error of an fp64 softmax attention for odd shapes, GQA, masks and head sizes that are not
// whole tile columns; independent of the thread count; taken by ops::attention only without
// grad and outside a recompute block's first pass, so training keeps the fp32 path. Also the
// decode form of both (one query a row, a kv head's query heads taken together) against fp64.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "autograd/compute_dtype.h"
#include "autograd/kernels/attention.h"
#include "autograd/kernels/bf16_gemm.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/recompute.h"
#include "autograd/tensor.h"
#include "base/parallel.h"
#include "tests/support/random_values.h"

namespace glm4 {
namespace {

bool native_bf16() { return kernels::bf16_kernel() != kernels::Bf16Kernel::kNone; }

using testing::randn;

struct Case {
  int64_t B, T, S, Hq, Hkv, D;
  AttentionMask mask;
};

// Unit-variance q [B, T, Hq, D], k and v [B, S, Hkv, D] from seeds seed, seed + 1, seed + 2.
struct Inputs {
  std::vector<float> q, k, v;
};
Inputs random_inputs(const Case& c, uint32_t seed) {
  return {randn(size_t(c.B * c.T * c.Hq * c.D), seed),
          randn(size_t(c.B * c.S * c.Hkv * c.D), seed + 1),
          randn(size_t(c.B * c.S * c.Hkv * c.D), seed + 2)};
}

// In fp64: out [B, T, Hq, D], the softmax over the visible keys of each query as the mask says,
// and lse [B, Hq, T], each row's log-sum-exp of its scaled scores (+inf where it sees nothing).
struct Reference {
  std::vector<double> out, lse;
};
Reference reference(const Case& c, const std::vector<float>& q, const std::vector<float>& k,
                    const std::vector<float>& v) {
  std::vector<double> out(size_t(c.B * c.T * c.Hq * c.D), 0.0);
  std::vector<double> lse(size_t(c.B * c.Hq * c.T), INFINITY);
  const double scale = 1.0 / std::sqrt(double(c.D));
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t h = 0; h < c.Hq; ++h) {
        int64_t lo, hi;
        c.mask.range(b, t, c.S, &lo, &hi);
        if (lo >= hi) continue;
        const int64_t kvh = h / (c.Hq / c.Hkv);
        std::vector<double> w(size_t(hi - lo));
        double mx = -INFINITY, sum = 0;
        for (int64_t s = lo; s < hi; ++s) {
          double dot = 0;
          for (int64_t i = 0; i < c.D; ++i)
            dot += double(q[size_t(((b * c.T + t) * c.Hq + h) * c.D + i)]) *
                   k[size_t(((b * c.S + s) * c.Hkv + kvh) * c.D + i)];
          w[size_t(s - lo)] = dot * scale;
          mx = std::max(mx, dot * scale);
        }
        for (double& x : w) sum += (x = std::exp(x - mx));
        lse[size_t((b * c.Hq + h) * c.T + t)] = mx + std::log(sum);
        for (int64_t s = lo; s < hi; ++s)
          for (int64_t i = 0; i < c.D; ++i)
            out[size_t(((b * c.T + t) * c.Hq + h) * c.D + i)] +=
                w[size_t(s - lo)] / sum * v[size_t(((b * c.S + s) * c.Hkv + kvh) * c.D + i)];
      }
  return {out, lse};
}

std::vector<float> run(const Case& c, const std::vector<float>& q, const std::vector<float>& k,
                       const std::vector<float>& v, bool bf16, std::vector<float>* lse = nullptr) {
  std::vector<float> out(q.size(), -7.0f);
  kernels::AttentionArgs a;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.out = out.data();
  a.B = c.B;
  a.T = c.T;
  a.S = c.S;
  a.Hq = c.Hq;
  a.Hkv = c.Hkv;
  a.D = c.D;
  a.q_batch_stride = c.T * c.Hq * c.D;
  a.kv_batch_stride = c.S * c.Hkv * c.D;
  a.scale = float(1.0 / std::sqrt(double(c.D)));
  a.mask = &c.mask;
  a.bf16_tiles = bf16 ? kernels::bf16_kernel() : kernels::Bf16Kernel::kNone;
  if (lse) {
    lse->assign(size_t(c.B * c.Hq * c.T), -7.0f);
    a.lse = lse->data();
  }
  kernels::attention_forward(a);
  return out;
}

double max_error(const std::vector<float>& got, const std::vector<double>& ref) {
  double e = 0;
  for (size_t i = 0; i < ref.size(); ++i) e = std::max(e, std::fabs(got[i] - ref[i]));
  return e;
}

TEST(AttentionBf16, WithinBf16ErrorOfFp64ForShapesMasksAndHeadSizes) {
  if (!native_bf16())
    GTEST_SKIP() << "this CPU has no native bf16 dot products (AMX or AVX512-BF16)";
  std::vector<Case> cases;
  cases.push_back({1, 100, 100, 4, 2, 64, {}});  // causal prefill, GQA, ragged tiles
  cases.push_back({2, 37, 37, 2, 1, 24, {}});    // head size not a whole tile column
  Case padded{2, 70, 70, 2, 2, 16, {}};
  padded.mask.kv_begin = {0, 9};  // left padding in row 1
  padded.mask.kv_end = {61, 70};
  cases.push_back(padded);
  Case chunk{1, 20, 90, 2, 2, 32, {}};  // a prefill chunk after 70 cached keys
  chunk.mask.q_offset = 70;
  cases.push_back(chunk);
  for (const Case& c : cases) {
    const auto [q, k, v] = random_inputs(c, 1);
    const std::vector<double> ref = reference(c, q, k, v).out;
    const std::vector<float> f32 = run(c, q, k, v, false), bf16 = run(c, q, k, v, true);
    const double e32 = max_error(f32, ref), e16 = max_error(bf16, ref);
    EXPECT_LT(e32, 1e-5) << "D " << c.D;
    // bf16 rounding of q, k, p and v (2^-9 relative each) on unit-variance data.
    EXPECT_LT(e16, 2e-2) << "D " << c.D;
    EXPECT_GT(e16, e32) << "D " << c.D << ": the bf16 tiles did not run";
    for (int64_t b = 0; b < c.B; ++b)  // padding queries write zeros, as the fp32 path does
      for (int64_t t = 0; t < c.T; ++t) {
        int64_t lo, hi;
        c.mask.range(b, t, c.S, &lo, &hi);
        if (lo < hi) continue;
        for (int64_t i = 0; i < c.Hq * c.D; ++i)
          ASSERT_EQ(bf16[size_t((b * c.T + t) * c.Hq * c.D + i)], 0.0f);
      }
  }
}

// One query a row (a decode step) runs a kv head's query heads as the rows of one task, a range
// of the keys at a time: its output and log-sum-exp against fp64; more heads a group than a task
// holds (40 here) fall back to a task a head.
TEST(AttentionDecode, GroupedQueryHeadsMatchFp64) {
  // The query after S - 1 cached keys sees all S.
  auto step = [](int64_t S, int64_t Hq, int64_t Hkv, int64_t D) {
    Case c{1, 1, S, Hq, Hkv, D, {}};
    c.mask.q_offset = S - 1;
    return c;
  };
  std::vector<Case> cases;
  cases.push_back(step(190, 16, 2, 64));      // moe-mid's groups of 8
  cases.push_back(step(300, 32, 2, 128));     // GLM-4-9B's groups of 16
  cases.push_back(step(65, 40, 1, 32));       // one group of 40: a task a head
  cases.push_back(step(5, 6, 6, 16));         // no sharing
  cases.push_back(step(64, 48, 8, 128));      // GLM-4-32B's groups of 6, one whole key tile
  cases.push_back(step(129, 24, 2, 80));      // groups of 12 (GLM-4.5); d not whole blocks
  cases.push_back(step(200, 64, 2, 16));      // groups of 32, the most a task takes
  cases.push_back(step(1300, 32, 2, 128));    // ranges of 192 keys, the last one short
  cases.push_back({1, 1, 10, 4, 2, 64, {}});  // causal at position 0: the first key only
  Case none{1, 1, 10, 4, 2, 64, {}};          // a padding query: sees nothing, gives zeros
  none.mask.q_offset = -9;
  cases.push_back(none);
  Case padded{2, 1, 90, 12, 3, 48, {}};  // two rows of a batch, the second left-padded
  padded.mask.kv_begin = {0, 30};
  padded.mask.kv_end = {71, 90};
  padded.mask.q_offset = 89;
  cases.push_back(padded);
  Case window{1, 1, 77, 8, 2, 32, {}};  // a step at key 40 of 77 (causal: keys past it unseen)
  window.mask.q_offset = 40;
  cases.push_back(window);
  for (const Case& c : cases) {
    const auto [q, k, v] = random_inputs(c, 11);
    const auto [ref, ref_lse] = reference(c, q, k, v);
    std::vector<float> lse;
    EXPECT_LT(max_error(run(c, q, k, v, false, &lse), ref), 1e-5) << c.Hq << " heads, " << c.Hkv;
    for (size_t i = 0; i < lse.size(); ++i) {
      if (std::isinf(ref_lse[i])) {
        EXPECT_TRUE(std::isinf(lse[i]) && lse[i] > 0) << "row " << i << ": " << lse[i];
      } else {
        EXPECT_NEAR(lse[i], ref_lse[i], 1e-5) << c.Hq << " heads, row " << i;
      }
    }
    if (native_bf16()) {
      EXPECT_LT(max_error(run(c, q, k, v, true), ref), 2e-2) << c.Hq;
    }
  }
}

// A decode step's keys are cut into ranges taken in parallel and joined in order: the same bits
// on one thread as on several, the log-sum-exp included.
TEST(AttentionDecode, IgnoresTheThreadCount) {
  Case c{2, 1, 1100, 16, 2, 64, {}};
  c.mask.q_offset = 1099;
  c.mask.kv_begin = {0, 300};  // the second row left-padded: its first range sees nothing
  const auto [q, k, v] = random_inputs(c, 5);
  const int threads = max_threads();
  std::vector<float> lse_one, lse_many;
  set_max_threads(1);
  const std::vector<float> one = run(c, q, k, v, false, &lse_one);
  set_max_threads(std::max(2, threads));
  const std::vector<float> many = run(c, q, k, v, false, &lse_many);
  set_max_threads(threads);
  EXPECT_EQ(one, many);
  EXPECT_EQ(lse_one, lse_many);
}

TEST(AttentionBf16, IgnoresTheThreadCount) {
  if (!native_bf16())
    GTEST_SKIP() << "this CPU has no native bf16 dot products (AMX or AVX512-BF16)";
  const Case c{2, 130, 130, 8, 2, 64, {}};
  const auto [q, k, v] = random_inputs(c, 4);
  const int threads = max_threads();
  set_max_threads(1);
  const std::vector<float> one = run(c, q, k, v, true);
  set_max_threads(std::max(2, threads));
  const std::vector<float> many = run(c, q, k, v, true);
  set_max_threads(threads);
  EXPECT_EQ(one, many);
}

// ops::attention under bf16 compute: the bf16 tiles without grad (generation), the fp32 kernels
// with grad and in a recompute block's first pass (whose backward reruns the block with grad).
TEST(AttentionBf16, OnlyInferenceTakesThem) {
  if (!native_bf16())
    GTEST_SKIP() << "this CPU has no native bf16 dot products (AMX or AVX512-BF16)";
  const Case c{1, 48, 48, 2, 1, 32, {}};
  const std::vector<float> qv = randn(size_t(c.T * c.Hq * c.D), 7),
                           kv = randn(size_t(c.S * c.D), 8), vv = randn(size_t(c.S * c.D), 9);
  const std::vector<float> f32 = run(c, qv, kv, vv, false), bf16 = run(c, qv, kv, vv, true);
  ASSERT_NE(f32, bf16);
  Tensor q = Tensor::from({1, c.T, c.Hq, c.D}, qv), k = Tensor::from({1, c.S, 1, c.D}, kv),
         v = Tensor::from({1, c.S, 1, c.D}, vv);
  auto values = [](const Tensor& t) { return std::vector<float>(t.data(), t.data() + t.numel()); };
  const ComputeChoice on_bf16 = bf16_compute(kernels::bf16_kernel());
  {
    NoGradGuard no_grad;
    EXPECT_EQ(values(ops::attention(q, k, v, c.mask, on_bf16)), bf16);
  }
  q.set_requires_grad(true);
  EXPECT_EQ(values(ops::attention(q, k, v, c.mask, on_bf16)), f32);
  Tensor first = recompute(
      [&](const std::vector<Tensor>& in) { return ops::attention(in[0], k, v, c.mask, on_bf16); },
      {q});
  EXPECT_EQ(values(first), f32);
  {
    NoGradGuard no_grad;
    EXPECT_EQ(values(ops::attention(q, k, v, c.mask, kF32Compute)), f32);
  }
}

}  // namespace
}  // namespace glm4
