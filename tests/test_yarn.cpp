// YaRN RoPE scaling: the frequencies and scales a config gives (against values worked out from
// transformers' formulas), and the tiny glm4, glm4_moe_lite and glm4_moe models of tests/data/yarn
// against the PyTorch oracle (tools/reference/yarn_reference.py): logits, hidden states, greedy ids
// through the KV cache and the latent cache, cached decode equal to full recomputation, and a
// LoRA step's loss and gradients through YaRN's scaled rotation and softmax against PEFT.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "infer/cached_forward.h"
#include "infer/score.h"
#include "model/adapter/adapter_io.h"
#include "model/glm4_model.h"
#include "model/lora.h"
#include "model/rope_scaling.h"
#include "tests/support/edited_model_copy.h"
#include "tests/support/moe_batch_fixture.h"
#include "tests/support/reference_batches.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

std::string yarn_dir(const std::string& name) {
  return std::string(GLM4_TEST_DATA) + "/yarn/" + name;
}

testing::BatchFixture read_fixture(const std::string& name) {
  return testing::read_batch_fixture(yarn_dir(name) + "/fixture.safetensors");
}

// The default RoPE gives exactly the frequencies the rope op computed from theta before YaRN.
TEST(YarnFrequencies, DefaultRopeIsTheThetaPowersWithScaleOne) {
  ModelConfig c;
  c.rotary_dim = 8;
  c.rope_theta = 500.0;
  const RopeFrequencies f = rope_frequencies(c);
  ASSERT_EQ(f.inv_freq.size(), 4u);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(f.inv_freq[size_t(i)], float(1.0 / std::pow(500.0, double(2 * i) / 8.0)));
  EXPECT_EQ(f.scale, 1.0f);
  EXPECT_EQ(latent_score_mscale(c), 1.0);
}

// tiny_glm4_yarn's settings: theta 50, 8 rotary dims, factor 4, original context 64, betas 16
// and 2 untruncated. The correction dims are 8 ln(64 / (2 pi beta)) / (2 ln 50): below 0 for
// beta 16 (so 0) and 1.66447 for beta 2, so pair 1 takes 1 / 1.66447 of the interpolated
// frequency and pairs 2, 3 take it whole. cos/sin scale 0.1 ln 4 + 1.
TEST(YarnFrequencies, RampBetweenTheCorrectionDims) {
  auto model = load_model(yarn_dir("tiny_glm4_yarn"));
  const ModelConfig& c = model->config;
  ASSERT_TRUE(c.rope_scaling);
  const RopeFrequencies f = rope_frequencies(c);
  const double high =
      8.0 * std::log(64.0 / (2.0 * std::numbers::pi * 2.0)) / (2.0 * std::log(50.0));
  ASSERT_NEAR(high, 1.66447, 1e-5);
  for (int i = 0; i < 4; ++i) {
    const double plain = 1.0 / std::pow(50.0, double(2 * i) / 8.0);
    const double share = std::min(1.0, double(i) / high);
    EXPECT_NEAR(f.inv_freq[size_t(i)], plain / 4.0 * share + plain * (1.0 - share), 1e-7) << i;
  }
  EXPECT_FLOAT_EQ(f.scale, float(0.1 * std::log(4.0) + 1.0));
  // truncated (the default), the range is [0, 2]: pair 1 half and half
  ModelConfig t = c;
  t.rope_scaling->truncate.reset();
  const RopeFrequencies g = rope_frequencies(t);
  const double plain1 = 1.0 / std::pow(50.0, 2.0 / 8.0);
  EXPECT_NEAR(g.inv_freq[1], plain1 / 4.0 * 0.5 + plain1 * 0.5, 1e-7);
  EXPECT_EQ(g.inv_freq[0], 1.0f);  // pair 0 keeps its (extrapolated) frequency
}

// tiny_lite_yarn: mscale = mscale_all_dim = 1 leave cos/sin alone and scale the softmax by
// (0.1 ln 4 + 1)^2; an explicit attention_factor wins; mscale_all_dim alone scales both.
TEST(YarnFrequencies, AttentionFactorAndLatentScale) {
  auto model = load_model(yarn_dir("tiny_lite_yarn"));
  ModelConfig c = model->config;
  const double m = 0.1 * std::log(4.0) + 1.0;
  EXPECT_EQ(rope_frequencies(c).scale, 1.0f);
  EXPECT_DOUBLE_EQ(latent_score_mscale(c), m * m);
  c.rope_scaling->mscale.reset();
  EXPECT_FLOAT_EQ(rope_frequencies(c).scale, float(m));
  c.rope_scaling->attention_factor = 0.75;
  EXPECT_EQ(rope_frequencies(c).scale, 0.75f);
  c.rope_scaling->mscale_all_dim.reset();
  EXPECT_EQ(latent_score_mscale(c), 1.0);
}

class YarnParity : public ::testing::TestWithParam<std::string> {};

TEST_P(YarnParity, LogitsAndHiddenStatesMatchTheReference) {
  auto model = load_model(yarn_dir(GetParam()));
  ASSERT_TRUE(model->config.rope_scaling);
  const testing::BatchFixture f = read_fixture(GetParam());
  const testing::BatchRun r = testing::run_batch(*model, f);
  const int64_t H = model->config.hidden_size, V = model->config.vocab_size;
  double worst_hidden = 0;
  for (size_t l = 0; l < r.layers.size(); ++l) {
    const double e = testing::max_abs_error(
        r.layers[l].data(), read_f32(f.file->at("hidden." + std::to_string(l))), f, H);
    EXPECT_LE(e, 1e-4) << "hidden." << l;
    worst_hidden = std::max(worst_hidden, e);
  }
  const double logits_err =
      testing::max_abs_error(r.logits.data(), read_f32(f.file->at("logits")), f, V);
  EXPECT_LE(logits_err, 1e-4);
  std::printf("[ yarn ] %s: max |ours - fp64| logits %.3g, hidden states %.3g\n",
              GetParam().c_str(), logits_err, worst_hidden);
}

// tiny_moe_yarn's settings written as transformers 5 writes them (YaRN, rope_theta and
// partial_rotary_factor inside rope_parameters, none at the top level) give the same model.
TEST(YarnConfig, Glm4MoeRopeParametersFormGivesTheSameLogits) {
  testing::TempDir tmp;
  testing::copy_model_edited(yarn_dir("tiny_moe_yarn"), tmp.path(),
                             [](testing::EditedTensor&) { return true; });
  nlohmann::json j =
      nlohmann::json::parse(std::ifstream(yarn_dir("tiny_moe_yarn") + "/config.json"));
  nlohmann::json rp = j["rope_scaling"];
  rp["rope_theta"] = j["rope_theta"];
  rp["partial_rotary_factor"] = j["partial_rotary_factor"];
  for (const char* k : {"rope_scaling", "rope_theta", "partial_rotary_factor"}) j.erase(k);
  j["rope_parameters"] = rp;
  std::ofstream(tmp / "config.json") << j.dump(2);
  auto t4 = load_model(yarn_dir("tiny_moe_yarn")), t5 = load_model(tmp.path());
  ASSERT_TRUE(t5->config.rope_scaling);
  const testing::BatchFixture f = read_fixture("tiny_moe_yarn");
  EXPECT_EQ(testing::run_batch(*t5, f).logits.to_vector(),
            testing::run_batch(*t4, f).logits.to_vector());
}

// Greedy ids through the KV cache (glm4, glm4_moe) or the latent cache (glm4_moe_lite) equal the
// reference's, which it computed by full recomputation.
TEST_P(YarnParity, GreedyIdsThroughTheCacheMatchTheReference) {
  auto model = load_model(yarn_dir(GetParam()));
  const testing::GreedyRun r = testing::run_greedy(*model, read_fixture(GetParam()));
  EXPECT_EQ(r.got, r.want);
}

// Prefill of 5 then one token a step through the cache equals full recomputation at every step;
// for glm4_moe_lite also with an unmerged kv_b_proj adapter (B = 0), which expands the cached
// latents instead of attending in the latent space.
TEST_P(YarnParity, CachedDecodeEqualsFullRecomputation) {
  auto model = load_model(yarn_dir(GetParam()));
  auto expanded = load_model(yarn_dir(GetParam()));
  if (has_latent_attention(expanded->config)) {
    LoraConfig lora;
    lora.targets = {"kv_b_proj"};
    EXPECT_EQ(expanded->add_lora(lora, 1), expanded->config.num_hidden_layers);
  }
  const testing::BatchFixture f = read_fixture(GetParam());
  const std::vector<int32_t> ids(f.ids.begin() + f.T, f.ids.begin() + f.T + f.lengths[1]);
  const int64_t V = model->config.vocab_size;
  double worst = 0;
  for (const Glm4Model* m : {model.get(), expanded.get()}) {
    KvCache cache = make_cache(*m);
    for (size_t n = 5; n <= ids.size(); ++n) {
      const size_t first = n == 5 ? 0 : n - 1;
      CachedRow row{&cache, std::span<const int32_t>(ids.data() + first, n - first),
                    int64_t(first)};
      const std::vector<float> step = cached_forward(*m, {&row, 1}, true).to_vector();
      NoGradGuard no_grad;
      ForwardContext ctx;
      ctx.seq = int64_t(n);
      for (size_t t = 0; t < n; ++t) ctx.positions.push_back(int32_t(t));
      const std::vector<int32_t> prefix(ids.begin(), ids.begin() + int64_t(n));
      const Tensor full = m->logits(m->forward_hidden(prefix, ctx), ctx);
      for (int64_t v = 0; v < V; ++v)
        worst = std::max(worst,
                         double(std::abs(step[size_t(v)] - full.data()[(int64_t(n) - 1) * V + v])));
    }
  }
  EXPECT_LE(worst, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, YarnParity,
                         ::testing::Values("tiny_glm4_yarn", "tiny_lite_yarn", "tiny_moe_yarn"));

// PEFT LoRA on the attention projections of tiny_lite_yarn (and its shared expert's gate_proj,
// see tools/reference/yarn_reference.py): the loss of one batch and every
// adapter gradient (through the scaled rope backward and the mscale^2 softmax scale) equal the
// fp64 reference's.
TEST(YarnLora, LiteLossAndGradientsMatchPeft) {
  auto model = load_model(yarn_dir("tiny_lite_yarn"));
  load_adapter(*model, yarn_dir("lora_lite_yarn"));
  const auto file = SafetensorsFile::open(yarn_dir("lora_lite_yarn") + "/fixture.safetensors");
  Tensor loss = batch_loss(*model, testing::fixture_train_batch(*file, 0, 0), {.training = true});
  backward(loss);
  const double want = read_f32(file->at("losses"))[0];
  EXPECT_NEAR(double(loss.item()), want, 1e-5 * want);
  auto params = model->lora_parameters();
  ASSERT_EQ(params.size(), 26u);  // 3 layers x 4 projections, the shared gate_proj; A and B
  double worst = 0;
  for (auto& [name, t] : params) {
    ASSERT_TRUE(t.grad().defined()) << name;
    const double e = testing::max_relative_error(
        t.grad(), read_f32(file->at("grad0.base_model.model." + name + ".weight")));
    EXPECT_LE(e, 1e-4) << name;
    worst = std::max(worst, e);
  }
  std::printf("[ yarn lora ] loss %.8f (fp64 %.8f), worst gradient relative error %.3g\n",
              double(loss.item()), want, worst);
}

// The rope op's backward is the transposed (inverse, scaled) rotation: <rope(x), g> equals
// <x, rope^T(g)> for arbitrary frequencies and a cos/sin scale, both pair styles.
TEST(YarnRopeOp, BackwardIsTheAdjointOfTheScaledRotation) {
  const RopeFrequencies f{{1.0f, 0.37f, 0.011f}, 1.25f};
  const std::vector<int32_t> pos{0, 3, 17, 90};
  for (RopeStyle style : {RopeStyle::Interleaved, RopeStyle::RotateHalf}) {
    Tensor x = Tensor::zeros({1, 4, 2, 8});
    Tensor g = Tensor::zeros({1, 4, 2, 8});
    for (int64_t i = 0; i < x.numel(); ++i) {
      x.data()[i] = float(std::sin(0.7 * double(i) + 0.1));
      g.data()[i] = float(std::cos(1.3 * double(i)));
    }
    x.set_requires_grad(true);
    Tensor y = ops::rope(x, pos, f, style);
    double lhs = 0;
    for (int64_t i = 0; i < y.numel(); ++i) lhs += double(y.data()[i]) * double(g.data()[i]);
    backward(ops::sum(ops::mul(y, g)));
    double rhs = 0;
    for (int64_t i = 0; i < x.numel(); ++i) rhs += double(x.data()[i]) * double(x.grad().data()[i]);
    EXPECT_NEAR(lhs, rhs, 1e-4);
    // the pass-through dims 6 and 7 are untouched, the rotated ones scaled by 1.25 in norm
    EXPECT_EQ(y.data()[6], x.data()[6]);
    const int64_t a = 0, b = style == RopeStyle::Interleaved ? 1 : 3;  // pair 0 of row 1
    const float norm_in = std::hypot(x.data()[8 * 2 + a], x.data()[8 * 2 + b]);
    const float norm_out = std::hypot(y.data()[8 * 2 + a], y.data()[8 * 2 + b]);
    EXPECT_NEAR(norm_out, 1.25f * norm_in, 1e-5);
  }
}

}  // namespace
}  // namespace glm4
