// glm4_moe_lite (GLM-4.7-Flash's latent attention + MoE) computes what the PyTorch oracle
// (tools/reference/glm4_moe_lite_model.py) computes on the fixtures of tests/data/moe_lite: logits
// and each layer's hidden states, routing with dropped groups masked to -inf, greedy ids through
// the latent KV cache, equal to full recomputation (test_moe_lite_lora.cpp has the LoRA half).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "autograd/node.h"
#include "infer/cached_forward.h"
#include "io/safetensors.h"
#include "model/glm4_model.h"
#include "model/lora.h"
#include "tests/support/moe_batch_fixture.h"

namespace glm4 {
namespace {

std::string dir_of(const std::string& name) {
  return std::string(GLM4_TEST_DATA) + "/moe_lite/" + name;
}

using Fixture = testing::BatchFixture;
using testing::BatchRun;
using testing::max_abs_error;
using testing::run_batch;

Fixture read_fixture(const std::string& name, const std::string& prefix = "") {
  return testing::read_batch_fixture(dir_of(name) + "/fixture.safetensors", prefix);
}

class MoeLiteParity : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeLiteParity, LogitsAndHiddenStatesMatchTheReference) {
  auto model = load_model(dir_of(GetParam()));
  ASSERT_TRUE(has_latent_attention(model->config));
  const Fixture f = read_fixture(GetParam());
  const BatchRun r = run_batch(*model, f);
  const int64_t H = model->config.hidden_size, V = model->config.vocab_size;
  ASSERT_EQ(r.layers.size(), size_t(model->config.num_hidden_layers));
  double worst_hidden = 0;
  for (size_t l = 0; l < r.layers.size(); ++l) {
    const double e = max_abs_error(r.layers[l].data(),
                                   read_f32(f.file->at("hidden." + std::to_string(l))), f, H);
    EXPECT_LE(e, 2e-6) << "hidden." << l;
    worst_hidden = std::max(worst_hidden, e);
  }
  const double logits_err = max_abs_error(r.logits.data(), read_f32(f.file->at("logits")), f, V);
  EXPECT_LE(max_abs_error(r.hidden.data(), read_f32(f.file->at("hidden.final")), f, H), 2e-6);
  EXPECT_LE(logits_err, 2e-6);
  std::printf("[ moe lite ] %s: max |ours - fp64| logits %.3g, hidden states %.3g\n",
              GetParam().c_str(), logits_err, worst_hidden);
}

// Every MoE layer picks the reference's experts (as sets) with its weights. tiny_lite's
// correction bias puts kept experts below 0.0, so a 0.0 mask of dropped groups would differ.
TEST_P(MoeLiteParity, RouterChoicesMatchTheReference) {
  auto model = load_model(dir_of(GetParam()));
  const Fixture f = read_fixture(GetParam());
  const BatchRun r = run_batch(*model, f);
  const int64_t k = model->config.num_experts_per_tok;
  ASSERT_EQ(int64_t(r.routes.size()),
            model->config.num_hidden_layers - model->config.first_k_dense_replace);
  double worst_w = 0;
  for (const RouterTrace& t : r.routes) {
    const std::string p = "router." + std::to_string(t.layer) + ".";
    const std::vector<int64_t> want = read_int(f.file->at(p + "indices"));
    const std::vector<float> want_w = read_f32(f.file->at(p + "weights"));
    for (int64_t b = 0; b < f.B; ++b)
      for (int64_t s = 0; s < f.lengths[size_t(b)]; ++s) {
        const int64_t n = b * f.T + s;
        std::vector<std::pair<int64_t, float>> ours;
        for (int64_t j = 0; j < k; ++j)
          ours.push_back({t.experts[size_t(n * k + j)], t.weights.data()[n * k + j]});
        std::sort(ours.begin(), ours.end());
        for (int64_t j = 0; j < k; ++j) {
          ASSERT_EQ(ours[size_t(j)].first, want[size_t(n * k + j)])
              << p << " row " << b << " position " << s;
          worst_w = std::max(worst_w,
                             double(std::abs(ours[size_t(j)].second - want_w[size_t(n * k + j)])));
        }
      }
  }
  EXPECT_LE(worst_w, 1e-5);
}

// Greedy decoding through the latent cache (the latent and the shared rotary key of each token)
// gives the reference's ids, which it computed by full recomputation.
TEST_P(MoeLiteParity, GreedyIdsThroughTheLatentCacheMatchTheReference) {
  auto model = load_model(dir_of(GetParam()));
  const testing::GreedyRun r = testing::run_greedy(*model, read_fixture(GetParam()));
  EXPECT_EQ(r.got, r.want);
  KvCache cache = make_cache(*model);
  EXPECT_TRUE(cache.keys_only());
}

// Logits of each position of `ids`: the first 5 as one cached chunk, then one token a step.
std::vector<std::vector<float>> cached_logits(const Glm4Model& model,
                                              const std::vector<int32_t>& ids,
                                              DType cache_dtype = DType::F32) {
  KvCache cache = make_cache(model, cache_dtype);
  std::vector<std::vector<float>> out;
  const size_t first = 5;
  CachedRow row{&cache, std::span<const int32_t>(ids.data(), first), 0};
  out.push_back(cached_forward(model, {&row, 1}, true).to_vector());
  for (size_t i = first; i < ids.size(); ++i) {
    row = {&cache, std::span<const int32_t>(ids.data() + i, 1), int64_t(i)};
    out.push_back(cached_forward(model, {&row, 1}, true).to_vector());
  }
  return out;
}

// The latent-space decode, and the expanded form an unmerged kv_b_proj adapter (B = 0, so the
// same numbers) takes, equal full recomputation at every step; with the cache in bf16, both stay
// within bf16's rounding of it.
TEST_P(MoeLiteParity, CachedDecodeEqualsFullRecomputation) {
  auto latent = load_model(dir_of(GetParam()));
  auto expanded = load_model(dir_of(GetParam()));
  LoraConfig lora;
  lora.targets = {"kv_b_proj"};
  EXPECT_EQ(expanded->add_lora(lora, 1), expanded->config.num_hidden_layers);
  const Fixture f = read_fixture(GetParam());
  const std::vector<int32_t> ids(f.ids.begin() + f.T, f.ids.begin() + f.T + f.lengths[1]);
  const int64_t V = latent->config.vocab_size;
  const auto a = cached_logits(*latent, ids), b = cached_logits(*expanded, ids);
  const auto c = cached_logits(*latent, ids, DType::BF16),
             d = cached_logits(*expanded, ids, DType::BF16);
  NoGradGuard no_grad;
  double worst_latent = 0, worst_expanded = 0, worst_bf16 = 0, largest = 0;
  for (size_t step = 0; step < a.size(); ++step) {
    const size_t n = 5 + step;
    ForwardContext ctx;
    ctx.seq = int64_t(n);
    for (size_t t = 0; t < n; ++t) ctx.positions.push_back(int32_t(t));
    const std::vector<int32_t> prefix(ids.begin(), ids.begin() + int64_t(n));
    const Tensor full = latent->logits(latent->forward_hidden(prefix, ctx), ctx);
    for (int64_t v = 0; v < V; ++v) {
      const float want = full.data()[(int64_t(n) - 1) * V + v];
      worst_latent = std::max(worst_latent, double(std::abs(a[step][size_t(v)] - want)));
      worst_expanded = std::max(worst_expanded, double(std::abs(b[step][size_t(v)] - want)));
      worst_bf16 = std::max({worst_bf16, double(std::abs(c[step][size_t(v)] - want)),
                             double(std::abs(d[step][size_t(v)] - want))});
      largest = std::max(largest, double(std::abs(want)));
    }
  }
  EXPECT_LE(worst_latent, 1e-5);
  EXPECT_LE(worst_expanded, 1e-5);
  // A bf16 cache (--kv-cache bf16): each cached value rounded to 8 bits of mantissa moves the
  // logits by less than two bf16 steps of the largest, and does move them.
  EXPECT_LE(worst_bf16, std::ldexp(largest, -7));
  EXPECT_GT(worst_bf16, 1e-5);
  std::printf("[ moe lite ] %s: cached vs full logits, latent %.3g, expanded %.3g\n",
              GetParam().c_str(), worst_latent, worst_expanded);
}

// Rows of different sequences in one cached forward (what serve's continuous batching does):
// each row's latent cache and logits equal running it alone, prompt chunks and decode steps.
TEST_P(MoeLiteParity, RowsOfOneCachedForwardEqualEachAlone) {
  auto model = load_model(dir_of(GetParam()));
  const Fixture f = read_fixture(GetParam());
  const std::vector<int32_t> a(f.ids.begin(), f.ids.begin() + f.lengths[0]),
      b(f.ids.begin() + f.T, f.ids.begin() + f.T + f.lengths[1]);
  KvCache ca = make_cache(*model), cb = make_cache(*model), alone_a = make_cache(*model),
          alone_b = make_cache(*model);
  // step 1: a's first 4 tokens beside b's first 6; step 2: one token each
  std::vector<CachedRow> rows{{&ca, std::span<const int32_t>(a.data(), 4), 0},
                              {&cb, std::span<const int32_t>(b.data(), 6), 0}};
  const std::vector<float> both = cached_forward(*model, rows, true).to_vector();
  rows = {{&ca, std::span<const int32_t>(a.data() + 4, 1), 4},
          {&cb, std::span<const int32_t>(b.data() + 6, 1), 6}};
  const std::vector<float> step = cached_forward(*model, rows, true).to_vector();
  const int64_t V = model->config.vocab_size;
  auto alone = [&](KvCache& cache, const std::vector<int32_t>& ids, size_t n, size_t first) {
    CachedRow row{&cache, std::span<const int32_t>(ids.data() + first, n), int64_t(first)};
    return cached_forward(*model, {&row, 1}, true).to_vector();
  };
  const std::vector<float> a1 = alone(alone_a, a, 4, 0), b1 = alone(alone_b, b, 6, 0),
                           a2 = alone(alone_a, a, 1, 4), b2 = alone(alone_b, b, 1, 6);
  double worst = 0;
  for (int64_t v = 0; v < V; ++v) {
    worst = std::max({worst, double(std::abs(both[size_t(v)] - a1[size_t(v)])),
                      double(std::abs(both[size_t(V + v)] - b1[size_t(v)])),
                      double(std::abs(step[size_t(v)] - a2[size_t(v)])),
                      double(std::abs(step[size_t(V + v)] - b2[size_t(v)]))});
  }
  EXPECT_LE(worst, 1e-5);
  EXPECT_EQ(ca.length(), 5);
  EXPECT_EQ(cb.length(), 7);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MoeLiteParity,
                         ::testing::Values("tiny_lite", "tiny_lite_plain"));

// The cache keeps kv_lora_rank + qk_rope_head_dim values a token a layer: 576 for GLM-4.7-Flash,
// against 2 x 20 heads x 256 for expanded keys and values.
TEST(MoeLiteCache, HoldsTheLatentAndTheRotaryKey) {
  const ModelConfig flash =
      load_model_config(std::filesystem::path(GLM4_SOURCE_DIR) / "configs" / "glm-4.7-flash.json");
  EXPECT_EQ(cache_values_per_token_layer(flash), 576);
  auto model = load_model(dir_of("tiny_lite"));
  KvCache cache = make_cache(*model);
  cache.begin(3);
  const int64_t L = model->config.num_hidden_layers;
  EXPECT_EQ(cache.bytes(), L * cache.capacity() * 20 * int64_t(sizeof(float)));  // 16 + 4
  KvCache half = make_cache(*model, DType::BF16);
  half.begin(3);
  EXPECT_EQ(half.bytes(), cache.bytes() / 2);
}

}  // namespace
}  // namespace glm4
