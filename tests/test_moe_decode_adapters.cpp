// MoeBlock's batched decode path with LoRA on its experts and shared expert: a live (unmerged)
// adapter, two resident adapters with rows split between them and rows with none, and both, give
// the graph path's numbers to the bit, on a block and through a tiny glm4_moe model; adapters keep
// the batched path, DoRA and trainable weights do not.
#include <gtest/gtest.h>

#include <random>
#include <variant>
#include <vector>

#include "autograd/compute_dtype.h"
#include "autograd/node.h"
#include "autograd/weight_quantize.h"
#include "model/adapter/adapter_io.h"
#include "model/forward_context.h"
#include "model/glm4_model.h"
#include "model/moe_block.h"
#include "tests/support/gradcheck.h"
#include "tests/support/random_values.h"
#include "tests/support/small_moe.h"

namespace glm4 {
namespace {

using testing::computes_to_test;
using testing::fill_moe_block;
using testing::randn;
using testing::small_moe_config;

void randomize(Tensor& t, uint32_t seed) {
  const std::vector<float> v = randn(size_t(t.numel()), seed, 0.05f);
  std::copy(v.begin(), v.end(), t.data());
}

// A live adapter (rank 4) on every linear, and/or resident slot 0 (rank 4) on two linears of
// three and slot 1 (rank 2) on every other one: some carry both slots, some one, some none.
void add_adapters(MoeBlock& m, bool live, bool resident) {
  std::mt19937_64 rng(5);
  uint32_t seed = 1000;
  int i = 0;
  m.visit_linears("mlp", 0, [&](const LinearSite&, Linear& l) {
    if (live) {
      l.add_lora(4, 2.0f, 0.0f, rng);  // no dropout: the graph path runs with `training` on
      randomize(l.lora->lora_B, seed++);
    }
    if (resident) {
      l.resident.resize(2);
      if (i % 3 != 2) l.resident[0] = l.make_lora(4, 1.5f, 0.0f, rng);
      if (i % 2 == 0) l.resident[1] = l.make_lora(2, 0.5f, 0.0f, rng);
      for (auto& r : l.resident)
        if (r) randomize(r->lora_B, seed++);
    }
    ++i;
  });
}

// Rows of 1, 2 and 16 tokens: slot 1; slots 1 then 0; slots 0, none, 1, 0, none, 1.
AdapterRows rows_for(int64_t tokens) {
  if (tokens == 1) return {{0, 1}, {1}};
  if (tokens == 2) return {{0, 1, 2}, {1, 0}};
  return {{0, 3, 5, 9, 12, 13, 16}, {0, -1, 1, 0, -1, 1}};
}

std::vector<float> values(const Tensor& t) { return {t.data(), t.data() + t.numel()}; }

TEST(MoeDecodeAdapters, EqualTheGraphPathToTheBit) {
  const int64_t most = MoeBlock::kDecodeBatchTokens;
  for (int form : {0, 1, 3})
    for (const ComputeChoice& compute : computes_to_test())
      for (int adapters : {1, 2, 3}) {  // live, resident, both
        const bool live = adapters & 1, resident = adapters & 2;
        MoeBlock plain(small_moe_config()), m(small_moe_config());
        fill_moe_block(plain, form);
        fill_moe_block(m, form);
        add_adapters(m, live, resident);
        for (int64_t tokens : {int64_t(1), int64_t(2), most}) {
          const std::string what = "form " + std::to_string(form) + ", " + compute.describe() +
                                   ", adapters " + std::to_string(adapters) + ", " +
                                   std::to_string(tokens) + " tokens";
          NoGradGuard no_grad;
          const AdapterRows rows = rows_for(tokens);
          ForwardContext ctx;
          ctx.compute = compute;
          ctx.adapter_rows = resident ? &rows : nullptr;
          const Tensor x = testing::random_tensor({1, tokens, 256}, uint64_t(7 + tokens));
          ForwardContext graph_ctx = ctx;
          graph_ctx.training = true;  // the graph path (resident adapters refuse gradients)
          ASSERT_FALSE(m.decodes_batched(graph_ctx, tokens)) << what;
          ASSERT_TRUE(m.decodes_batched(ctx, tokens)) << what;
          const std::vector<float> graph = values(m.forward(x, graph_ctx));
          const std::vector<float> batched = values(m.forward(x, ctx));
          EXPECT_EQ(batched, graph) << what;
          EXPECT_NE(batched, values(plain.forward(x, ctx))) << what << ": the adapters add nothing";
        }
      }
}

// Resident adapters without adapter rows, or with every row on no adapter, leave the base.
TEST(MoeDecodeAdapters, RowsWithoutAnAdapterGetTheBase) {
  MoeBlock plain(small_moe_config()), m(small_moe_config());
  fill_moe_block(plain, 1);
  fill_moe_block(m, 1);
  add_adapters(m, false, true);
  NoGradGuard no_grad;
  const Tensor x = testing::random_tensor({1, 4, 256}, 3);
  const AdapterRows none{{0, 4}, {-1}};
  ForwardContext ctx;
  const std::vector<float> base = values(plain.forward(x, ctx));
  EXPECT_EQ(values(m.forward(x, ctx)), base);
  ctx.adapter_rows = &none;
  EXPECT_EQ(values(m.forward(x, ctx)), base);
}

TEST(MoeDecodeAdapters, DoraAndTrainableWeightsTakeTheGraphPath) {
  NoGradGuard no_grad;
  ForwardContext ctx;
  {
    MoeBlock m(small_moe_config());
    fill_moe_block(m, 1);
    add_adapters(m, true, true);
    EXPECT_TRUE(m.decodes_batched(ctx, 1));
    EXPECT_FALSE(m.decodes_batched(ctx, MoeBlock::kDecodeBatchTokens + 1));
    m.experts[5].up_proj.lora->magnitude = Tensor::zeros({128});
    EXPECT_FALSE(m.decodes_batched(ctx, 1));
  }
  {
    MoeBlock m(small_moe_config());
    fill_moe_block(m, 0);
    add_adapters(m, false, true);
    m.shared_experts.down_proj.resident[1]->magnitude = Tensor::zeros({256});
    EXPECT_FALSE(m.decodes_batched(ctx, 1));
  }
  {
    MoeBlock m(small_moe_config());
    fill_moe_block(m, 0);
    m.experts[2].gate_proj.weight.make_trainable();
    EXPECT_FALSE(m.decodes_batched(ctx, 1));
  }
}

// A tiny glm4_moe model with a live adapter and the same adapter resident twice (the second
// scaled), 12 tokens in rows of the first slot, none and the second: its logits equal the graph
// path's to the bit (attention and the dense layer do not look at `training` without dropout).
TEST(MoeDecodeAdapters, TinyModelLogitsEqualTheGraphPath) {
  const std::string dir = std::string(GLM4_TEST_DATA) + "/moe/";
  auto model = load_model(dir + "tiny_moe");
  load_adapter(*model, dir + "lora_train_moe");
  load_resident_adapter(*model, dir + "lora_train_moe", 0);
  load_resident_adapter(*model, dir + "lora_train_moe", 1);
  model->visit_linears([](const LinearSite&, Linear& l) {
    if (l.resident.size() > 1 && l.resident[1])
      for (int64_t i = 0; i < l.resident[1]->lora_B.numel(); ++i)
        l.resident[1]->lora_B.data()[i] *= -0.5f;
  });
  const std::vector<int32_t> ids{5, 17, 200, 3, 9, 41, 77, 100, 8, 2, 33, 61};
  const AdapterRows rows{{0, 4, 7, 12}, {0, -1, 1}};
  NoGradGuard no_grad;
  auto logits = [&](bool training) {
    ForwardContext ctx;
    ctx.seq = 12;
    for (int t = 0; t < 12; ++t) ctx.positions.push_back(t);
    ctx.adapter_rows = &rows;
    ctx.training = training;
    return model->logits(model->forward_hidden(ids, ctx), ctx).to_vector();
  };
  ForwardContext ctx;
  EXPECT_TRUE(std::get<MoeBlock>(model->layers[1].mlp).decodes_batched(ctx, 12));
  EXPECT_EQ(logits(false), logits(true));
}

}  // namespace
}  // namespace glm4
