// glm4_moe computes what the PyTorch oracle (tools/reference/glm4_moe_model.py) computes on every
// fixture of tests/data/moe: logits and each layer's hidden states, each MoE layer's routing
// (experts as sets, weights and router logits), greedy ids, bf16 against PyTorch's bf16, and the
// mlx-lm stacked layout equal to the per-expert one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "autograd/node.h"
#include "base/check.h"
#include "infer/generator.h"
#include "io/safetensors.h"
#include "model/compute_choice.h"
#include "model/glm4_model.h"
#include "tests/support/cached_decode.h"
#include "tests/support/moe_batch_fixture.h"

namespace glm4 {
namespace {

std::string dir_of(const std::string& name) { return std::string(GLM4_TEST_DATA) + "/moe/" + name; }

using Fixture = testing::BatchFixture;
using testing::batch_context;
using testing::BatchRun;
using testing::max_abs_error;
using testing::run_batch;

Fixture read_fixture(const std::string& name, const std::string& prefix = "") {
  return testing::read_batch_fixture(dir_of(name) + "/fixture.safetensors", prefix);
}

class MoeParity : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeParity, LogitsAndHiddenStatesMatchTheReference) {
  auto model = load_model(dir_of(GetParam()));
  const Fixture f = read_fixture(GetParam());
  const BatchRun r = run_batch(*model, f);
  const int64_t H = model->config.hidden_size, V = model->config.vocab_size;
  ASSERT_EQ(r.layers.size(), size_t(model->config.num_hidden_layers));
  double worst_hidden = 0;
  for (size_t l = 0; l < r.layers.size(); ++l) {
    const double e = max_abs_error(r.layers[l].data(),
                                   read_f32(f.file->at("hidden." + std::to_string(l))), f, H);
    EXPECT_LE(e, 1e-4) << "hidden." << l;
    worst_hidden = std::max(worst_hidden, e);
  }
  const double final_err =
      max_abs_error(r.hidden.data(), read_f32(f.file->at("hidden.final")), f, H);
  const double logits_err = max_abs_error(r.logits.data(), read_f32(f.file->at("logits")), f, V);
  EXPECT_LE(final_err, 1e-4);
  EXPECT_LE(logits_err, 1e-4);
  std::printf("[ moe ] %s: max |ours - fp64| logits %.3g, hidden states %.3g, final norm %.3g\n",
              GetParam().c_str(), logits_err, worst_hidden, final_err);
}

// Each MoE layer picks the reference's experts for every valid token (as sets: upstream's order
// is unspecified), with its weights and router logits.
TEST_P(MoeParity, RouterChoicesMatchTheReference) {
  auto model = load_model(dir_of(GetParam()));
  const Fixture f = read_fixture(GetParam());
  const BatchRun r = run_batch(*model, f);
  const int64_t E = model->config.n_routed_experts, k = model->config.num_experts_per_tok;
  int64_t moe_layers = 0;
  for (int64_t l = 0; l < model->config.num_hidden_layers; ++l)
    moe_layers += is_moe_layer(model->config, l);
  ASSERT_EQ(int64_t(r.routes.size()), moe_layers);
  double worst_w = 0, worst_logit = 0;
  for (const RouterTrace& t : r.routes) {
    const std::string p = "router." + std::to_string(t.layer) + ".";
    const std::vector<int64_t> want = read_int(f.file->at(p + "indices"));
    const std::vector<float> want_w = read_f32(f.file->at(p + "weights"));
    worst_logit = std::max(
        worst_logit, max_abs_error(t.logits.data(), read_f32(f.file->at(p + "logits")), f, E));
    for (int64_t b = 0; b < f.B; ++b)
      for (int64_t s = 0; s < f.lengths[size_t(b)]; ++s) {
        const int64_t n = b * f.T + s;
        std::vector<std::pair<int64_t, float>>
            ours;  // (expert, weight), by expert id like the fixture
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
  EXPECT_LE(worst_logit, 1e-5);
  std::printf(
      "[ moe ] %s: routing equal as sets; max |weight - fp64| %.3g, |router logit - fp64| %.3g\n",
      GetParam().c_str(), worst_w, worst_logit);
}

TEST_P(MoeParity, GreedyIdsMatchTheReference) {
  auto model = load_model(dir_of(GetParam()));
  const testing::GreedyRun r = testing::run_greedy(*model, read_fixture(GetParam()));
  EXPECT_EQ(r.got, r.want);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MoeParity,
                         ::testing::Values("tiny_moe", "tiny_moe_plain", "tiny_moe_mlx",
                                           "tiny_moe_bf16"));

// The bf16 checkpoint: our logits are no further from the fp64 reference than PyTorch's own bf16
// forward is, in f32 compute (bf16 weights widened) and in bf16 compute where the CPU has it.
TEST(MoeBf16, LogitsNoWorseThanTorchBf16) {
  auto model = load_model(dir_of("tiny_moe_bf16"));
  const Fixture f = read_fixture("tiny_moe_bf16");
  const int64_t V = model->config.vocab_size;
  const std::vector<float> ref = read_f32(f.file->at("logits")),
                           torch = read_f32(f.file->at("logits_torch_bf16"));
  const double theirs = max_abs_error(torch.data(), ref, f, V);
  const double f32 = max_abs_error(run_batch(*model, f).logits.data(), ref, f, V);
  EXPECT_LE(f32, theirs);
  std::string bf16_line = "no native bf16 here";
  try {
    const ComputeChoice choice = apply_compute_flag(*model, "bf16");
    const double bf16 = max_abs_error(run_batch(*model, f).logits.data(), ref, f, V);
    EXPECT_LE(bf16, theirs);
    bf16_line = str_cat(choice.describe(), " ", bf16);
  } catch (const Error&) {
  }
  std::printf("[ moe bf16 ] max |logit - fp64|: PyTorch bf16 %.3g, ours f32 compute %.3g, %s\n",
              theirs, f32, bf16_line.c_str());
  model->visit([&](const std::string& name, Param& p) {
    if (name.ends_with("e_score_correction_bias")) {
      EXPECT_TRUE(p.value.defined()) << name;  // fp32
    } else if (p.is_matrix()) {
      EXPECT_EQ(p.frozen.dtype(), DType::BF16) << name;
    }
  });
}

// mlx-lm's stacked switch_mlp tensors are read as row ranges of the stacked tensor, without a
// copy, and give the per-expert checkpoint's logits bit for bit.
TEST(MoeMlxLayout, EqualsThePerExpertLayout) {
  auto hf = load_model(dir_of("tiny_moe"));
  auto mlx = load_model(dir_of("tiny_moe_mlx"));
  const Fixture f = read_fixture("tiny_moe");
  EXPECT_EQ(run_batch(*hf, f).logits.to_vector(), run_batch(*mlx, f).logits.to_vector());
  const MoeBlock& moe = std::get<MoeBlock>(mlx->layers[1].mlp);
  const Weight& e0 = moe.experts[0].up_proj.weight.frozen;
  const Weight& e1 = moe.experts[1].up_proj.weight.frozen;
  EXPECT_FALSE(e0.owns_buffer());
  EXPECT_EQ(static_cast<const char*>(e1.data()) - static_cast<const char*>(e0.data()),
            int64_t(e0.bytes()));  // consecutive rows of one mapped tensor
}

// Decoding with the KV cache gives the logits of a full forward over the sequence at every step;
// with the cache in bf16 (--kv-cache bf16), within two bf16 steps of the largest, and moved.
TEST(MoeCachedDecoding, EqualsFullRecomputationAtEveryStep) {
  for (const char* name : {"tiny_moe", "tiny_moe_plain"}) {
    auto model = load_model(dir_of(name));
    const Fixture f = read_fixture(name);
    std::vector<int32_t> prompt;
    for (int64_t v : read_int(f.file->at("greedy_prompt"))) prompt.push_back(int32_t(v));
    for (DType cache : {DType::F32, DType::BF16})
      for (int64_t chunk : {int64_t(512), int64_t(2)}) {
        GenerationConfig cfg;
        cfg.max_tokens = 20;
        cfg.prefill_chunk = chunk;
        cfg.kv_cache_dtype = cache;
        cfg.sampling.temperature = 0.8f;
        cfg.sampling.seed = 3;
        const testing::CachedDecodeGap gap = testing::cached_decode_gap(*model, prompt, cfg);
        EXPECT_EQ(gap.drawn, cfg.max_tokens);
        const std::string what = std::string(name) + ", prefill chunk " + std::to_string(chunk);
        if (cache == DType::F32) {
          EXPECT_LE(gap.worst, 1e-5) << what;
        } else {
          EXPECT_LE(gap.worst, std::ldexp(gap.largest, -7)) << what << ", bf16 cache";
          EXPECT_GT(gap.worst, 1e-5) << what << ": the bf16 cache changed nothing";
        }
      }
  }
}

}  // namespace
}  // namespace glm4
