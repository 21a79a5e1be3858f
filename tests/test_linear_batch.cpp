// linear_forward_batch against linear_forward one product at a time: the same bits for every
// weight form (fp32, bf16, f16, 4- and 8-bit), decode and prefill sizes mixed in one batch, under
// fp32 compute and (where the CPU has bf16 units) bf16 compute; and the MoE block's decode path
// against its graph path.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "autograd/compute_dtype.h"
#include "autograd/kernels/gemm.h"
#include "autograd/kernels/linear_batch.h"
#include "autograd/node.h"
#include "autograd/weight.h"
#include "autograd/weight_quantize.h"
#include "model/forward_context.h"
#include "model/linear.h"
#include "model/moe_block.h"
#include "tests/support/gradcheck.h"
#include "tests/support/random_values.h"
#include "tests/support/small_moe.h"

namespace glm4 {
namespace {

using testing::computes_to_test;
using testing::fill_moe_block;
using testing::randn;
using testing::random_weight;
using testing::small_moe_config;

TEST(LinearForwardBatch, EqualsEachProductAloneToTheBit) {
  struct Case {
    int form;
    int64_t M, N, K;
  };
  // Decode rows (1-4), a serve batch of bf16 (7) and a small batch (9) of 4-bit, prefill sizes
  // (40, 70) that run on their own; row counts that are not multiples of a block; an empty
  // product.
  const std::vector<Case> cases{
      {1, 1, 1000, 256}, {3, 1, 520, 512}, {4, 2, 96, 384},  {0, 3, 77, 200},  {2, 1, 130, 128},
      {1, 4, 64, 1024},  {3, 9, 48, 256},  {1, 40, 33, 128}, {3, 70, 64, 128}, {0, 0, 16, 64},
      {4, 1, 2048, 128}, {2, 40, 20, 64},  {1, 7, 75, 333}};
  for (const ComputeChoice& compute : computes_to_test()) {
    std::vector<Weight> weights;
    std::vector<std::vector<float>> xs, alone, batched;
    std::vector<LinearProduct> products;
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      weights.push_back(random_weight(c.form, c.N, c.K, uint32_t(10 + i)));
      xs.push_back(randn(size_t(c.M * c.K), uint32_t(50 + i)));
      alone.emplace_back(size_t(c.M * c.N), -1.0f);
      batched.emplace_back(size_t(c.M * c.N), -2.0f);
    }
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      linear_forward(xs[i].data(), c.M, c.K, weights[i], alone[i].data(), false, compute);
      products.push_back({xs[i].data(), c.M, &weights[i], batched[i].data()});
    }
    // The seven products of 1-4 rows and the bf16 one of 7 rows share the loop; 9 rows of a
    // 4-bit weight and the prefill sizes do not.
    EXPECT_EQ(linear_forward_batch(products, compute), 8) << compute.describe();
    for (size_t i = 0; i < cases.size(); ++i)
      EXPECT_EQ(batched[i], alone[i]) << "product " << i << " under " << compute.describe();
  }
}

// Products that read the same rows of X in one quantized format share one int8 form of them (an
// expert's gate_proj and up_proj); other row counts, rows and formats get their own; a second
// call reuses the thread's buffers. Each still equals its product alone.
TEST(LinearForwardBatch, SharedInputsEqualEachProductAlone) {
  const int64_t K = 256;
  const std::vector<float> X = randn(size_t(2 * K), 77);
  struct Case {
    int form;  // 3: 4 bits in groups of 64, 4: 8 bits in groups of 32
    int64_t M, N, first_row;
  };
  const std::vector<Case> cases{{3, 1, 100, 0}, {3, 1, 60, 0}, {4, 1, 90, 0},
                                {3, 2, 50, 0},  {3, 1, 70, 1}, {3, 1, 40, 0}};
  for (const ComputeChoice& compute : computes_to_test()) {
    std::vector<Weight> weights;
    std::vector<std::vector<float>> alone;
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      weights.push_back(random_weight(c.form, c.N, K, uint32_t(300 + i)));
      alone.emplace_back(size_t(c.M * c.N));
      linear_forward(X.data() + c.first_row * K, c.M, K, weights[i], alone[i].data(), false,
                     compute);
    }
    for (int call = 0; call < 2; ++call) {
      std::vector<std::vector<float>> batched;
      std::vector<LinearProduct> products;
      for (size_t i = 0; i < cases.size(); ++i) batched.emplace_back(alone[i].size(), -1.0f);
      for (size_t i = 0; i < cases.size(); ++i)
        products.push_back(
            {X.data() + cases[i].first_row * K, cases[i].M, &weights[i], batched[i].data()});
      linear_forward_batch(products, compute);
      for (size_t i = 0; i < cases.size(); ++i)
        EXPECT_EQ(batched[i], alone[i])
            << "product " << i << ", call " << call << " under " << compute.describe();
    }
  }
}

TEST(ForwardEach, EqualsEachLayerAloneWithBiasesAndAdapters) {
  std::mt19937_64 rng(3);
  std::vector<Linear> layers;
  for (int i = 0; i < 3; ++i) {
    layers.emplace_back(192, 64 * (i + 1), i != 1, i);
    layers.back().visit("l", [&](const std::string&, Param& p) {
      const int64_t rows = p.shape.size() == 2 ? p.shape[0] : 1;
      const int64_t cols = p.shape.back();
      std::vector<float> v = randn(size_t(rows * cols), uint32_t(rng()), 0.1f);
      p.assign(
          Weight::from_f32(v.data(), rows, cols, p.shape.size() == 2 ? DType::BF16 : DType::F32));
    });
  }
  const Linear* const ptrs[] = {&layers[0], &layers[1], &layers[2]};
  for (const ComputeChoice& compute : computes_to_test())
    for (int64_t tokens : {1, 5, 17})
      for (bool adapter : {false, true}) {
        if (adapter) layers[2].add_lora(4, 2.0f, 0.0f, rng);
        if (adapter) layers[2].lora->lora_B = testing::random_tensor({192, 4}, 9);
        ForwardContext ctx;
        ctx.compute = compute;
        NoGradGuard no_grad;
        const Tensor x = testing::random_tensor({1, tokens, 192}, uint64_t(tokens));
        const std::vector<Tensor> each = forward_each(ptrs, x, ctx);
        ASSERT_EQ(each.size(), 3u);
        for (size_t i = 0; i < 3; ++i) {
          const Tensor alone = layers[i].forward(x, ctx);
          ASSERT_EQ(each[i].shape(), alone.shape());
          EXPECT_EQ(std::vector<float>(each[i].data(), each[i].data() + each[i].numel()),
                    std::vector<float>(alone.data(), alone.data() + alone.numel()))
              << "layer " << i << ", " << tokens << " tokens, adapter " << adapter;
        }
        layers[2].lora.reset();
      }
}

TEST(MoeBlockDecode, EqualsTheGraphPathToTheBit) {
  for (int form : {0, 1, 3})
    for (const ComputeChoice& compute : computes_to_test())
      for (int64_t tokens : {1, 3, 16}) {
        MoeBlock m(small_moe_config());
        fill_moe_block(m, form);
        ForwardContext ctx;
        ctx.compute = compute;
        const Tensor x = testing::random_tensor({1, tokens, 256}, 7);
        const Tensor graph = m.forward(x, ctx);  // gradients on: the graph path
        ASSERT_FALSE(m.decodes_batched(ctx, tokens));
        NoGradGuard no_grad;
        ASSERT_TRUE(m.decodes_batched(ctx, tokens));
        const Tensor batched = m.forward(x, ctx);
        ASSERT_EQ(batched.shape(), graph.shape());
        const std::vector<float> a(graph.data(), graph.data() + graph.numel());
        const std::vector<float> b(batched.data(), batched.data() + batched.numel());
        EXPECT_EQ(a, b) << "form " << form << ", " << tokens << " tokens, " << compute.describe();
      }
}

// A prompt of 48 tokens over 32 experts (top 2: about 3 tokens an expert, none past
// kDecodeBatchTokens) takes the batched path too, equal to the graph path to the bit.
TEST(MoeBlockDecode, ShortPromptsOverManyExpertsTakeItToTheBit) {
  ModelConfig c = small_moe_config();
  c.n_routed_experts = 32;
  c.num_experts_per_tok = 2;
  for (int form : {0, 1, 3})
    for (const ComputeChoice& compute : computes_to_test()) {
      MoeBlock m(c);
      fill_moe_block(m, form);
      // no correction bias: the random one would send most tokens to one expert
      m.gate.e_score_correction_bias.value = Tensor::zeros({32});
      ForwardContext ctx;
      ctx.compute = compute;
      std::vector<RouterTrace> traces;
      ctx.router_traces = &traces;
      const Tensor x = testing::random_tensor({1, 48, 256}, 7);
      const Tensor graph = m.forward(x, ctx);  // gradients on: the graph path
      ASSERT_EQ(traces.size(), 1u);
      std::vector<int64_t> count(32, 0);
      for (int32_t e : traces[0].experts) ++count[size_t(e)];
      const int64_t most = *std::max_element(count.begin(), count.end());
      ASSERT_LE(most, MoeBlock::kDecodeBatchTokens);
      NoGradGuard no_grad;
      ASSERT_TRUE(m.decodes_batched(ctx, most));
      const Tensor batched = m.forward(x, ctx);
      const std::vector<float> a(graph.data(), graph.data() + graph.numel());
      const std::vector<float> b(batched.data(), batched.data() + batched.numel());
      EXPECT_EQ(a, b) << "form " << form << ", " << compute.describe();
    }
}

// LoRA adapters keep the batched path (tests/test_moe_decode_adapters.cpp); training does not.
TEST(MoeBlockDecode, TrainingAndLongInputsTakeTheGraphPath) {
  MoeBlock m(small_moe_config());
  fill_moe_block(m, 1);
  NoGradGuard no_grad;
  ForwardContext ctx;
  EXPECT_TRUE(m.decodes_batched(ctx, 16));
  EXPECT_FALSE(m.decodes_batched(ctx, 17));
  ctx.training = true;
  EXPECT_FALSE(m.decodes_batched(ctx, 1));
}

}  // namespace
}  // namespace glm4
