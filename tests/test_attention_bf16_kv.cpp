// Attention over a bf16 KV cache (ops::attention_bf16_kv, --kv-cache bf16 for models that cache
// keys and values): the fp32 attention of the widened values, bit for bit, for decode steps
// (grouped query heads as one task, or a head a task) and chunks of queries after cached tokens,
// over several key tiles and head sizes that are not whole vectors; on the bf16 units too where
// the CPU has them.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "autograd/compute_dtype.h"
#include "autograd/kernels/bf16_gemm.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "base/check.h"
#include "base/dtype.h"
#include "base/parallel.h"
#include "tests/support/random_values.h"

namespace glm4 {
namespace {

struct Case {
  int64_t T, S, Hq, Hkv, D;
};

// Runs both forms of each case: the bf16 values, and the fp32 tensors of the same values.
void expect_equal_to_fp32_of_the_rounded_values(const ComputeChoice& compute) {
  NoGradGuard no_grad;
  const Case cases[] = {{1, 150, 8, 2, 128},  // decode: a kv head's 4 query heads as one task
                        {1, 70, 3, 3, 40},    // decode without grouping, a ragged head size
                        {5, 133, 4, 1, 64},   // a chunk after 128 cached tokens
                        {40, 40, 6, 2, 24}};  // a prompt: more queries than a tile holds
  uint32_t seed = 11;
  for (const Case& c : cases) {
    const int64_t kv_values = c.S * c.Hkv * c.D;
    const std::vector<float> q = testing::randn(size_t(c.T * c.Hq * c.D), seed++),
                             k = testing::randn(size_t(kv_values), seed++),
                             v = testing::randn(size_t(kv_values), seed++);
    std::vector<uint16_t> k16(k.size()), v16(v.size());
    Tensor kr = Tensor::empty({1, c.S, c.Hkv, c.D}), vr = Tensor::empty({1, c.S, c.Hkv, c.D});
    int64_t rounded = 0;
    for (size_t i = 0; i < k.size(); ++i) {
      k16[i] = f32_to_bf16(k[i]);
      v16[i] = f32_to_bf16(v[i]);
      kr.data()[i] = bf16_to_f32(k16[i]);
      vr.data()[i] = bf16_to_f32(v16[i]);
      rounded += kr.data()[i] != k[i];
    }
    ASSERT_GT(rounded, 0);
    const Tensor query = Tensor::from({1, c.T, c.Hq, c.D}, q);
    AttentionMask mask;
    mask.q_offset = c.S - c.T;  // the queries follow what was cached
    const std::vector<float> want = ops::attention(query, kr, vr, mask, compute).to_vector();
    const std::vector<float> got =
        ops::attention_bf16_kv(query, k16.data(), v16.data(), c.S, c.Hkv, mask, compute)
            .to_vector();
    ASSERT_EQ(got.size(), want.size());
    int64_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i];
    EXPECT_EQ(differ, 0) << "T " << c.T << ", S " << c.S << ", heads " << c.Hq << "/" << c.Hkv
                         << ", D " << c.D;
  }
}

TEST(AttentionBf16Kv, EqualsFp32AttentionOfTheWidenedValues) {
  const int threads = max_threads();
  for (int n : {std::max(2, threads), 1}) {  // how the tasks are split must not matter either
    set_max_threads(n);
    expect_equal_to_fp32_of_the_rounded_values(ComputeChoice{});
  }
  set_max_threads(threads);
}

TEST(AttentionBf16Kv, EqualsItOnTheBf16UnitsToo) {
  if (kernels::bf16_kernel() == kernels::Bf16Kernel::kNone)
    GTEST_SKIP() << "this CPU has no native bf16 dot products (AMX or AVX512-BF16)";
  ComputeChoice bf16;
  bf16.dtype = ComputeDType::BF16;
  bf16.kernel = kernels::bf16_kernel();
  expect_equal_to_fp32_of_the_rounded_values(bf16);
}

TEST(AttentionBf16Kv, RefusesAShapeItCannotRead) {
  NoGradGuard no_grad;
  const Tensor q = Tensor::empty({1, 1, 3, 8});
  const std::vector<uint16_t> kv(2 * 2 * 8);
  EXPECT_THROW(
      ops::attention_bf16_kv(q, kv.data(), kv.data(), 2, 2, AttentionMask{}, ComputeChoice{}),
      Error);  // 2 kv heads do not divide 3 query heads
}

}  // namespace
}  // namespace glm4
