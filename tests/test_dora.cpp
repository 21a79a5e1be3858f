// DoRA (PEFT semantics, model/dora.h): gradients of A, B and the magnitude and a 20-step run
// against tools/reference/adapter_ref.py's PyTorch reference; a fresh adapter is the base; fused
// equals live; PEFT and MLX files round-trip; bf16 compute and quantized bases train; and what
// refuses it.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "autograd/node.h"
#include "base/check.h"
#include "infer/merge.h"
#include "infer/merge_quantized.h"
#include "infer/score.h"
#include "io/safetensors.h"
#include "model/adapter/adapter_io.h"
#include "model/compute_choice.h"
#include "model/dora.h"
#include "model/forward_context.h"
#include "model/glm4_model.h"
#include "tests/support/fixture_logits.h"
#include "tests/support/random_values.h"
#include "tests/support/reference_batches.h"
#include "tests/support/temp_dir.h"
#include "train/train_step.h"

namespace glm4 {
namespace {

using glm4::testing::TempDir;
using glm4::testing::throws_with;
namespace fs = std::filesystem;

const std::string kData = GLM4_TEST_DATA;
const std::string kPrefix = "base_model.model.";

// Our parameter name ("PATH.lora_A", ".lora_B", ".lora_magnitude") -> PEFT's key.
std::string peft_key(const std::string& name) {
  const std::string mag = ".lora_magnitude";
  if (name.ends_with(mag))
    return kPrefix + name.substr(0, name.size() - mag.size()) + ".lora_magnitude_vector";
  return kPrefix + name + ".weight";
}

LoraConfig dora_config() {
  LoraConfig l;
  l.rank = 4;
  l.alpha = 8;
  l.dora = true;
  l.targets = {"all-linear"};
  return l;
}

struct DoraFixture {
  std::shared_ptr<SafetensorsFile> file;
  std::unique_ptr<Glm4Model> model;
  std::vector<std::pair<std::string, Tensor>> params;  // PEFT key -> our tensor
};

DoraFixture setup(const std::string& model = "tiny_glm4") {
  DoraFixture f;
  f.file = SafetensorsFile::open(kData + "/dora_train_glm4/fixture.safetensors");
  f.model = load_model(kData + "/" + model);
  f.model->add_lora(dora_config(), 0);
  for (auto& [name, t] : f.model->lora_parameters()) {
    const std::string key = peft_key(name);
    std::vector<float> init = read_f32(f.file->at("init." + key));
    EXPECT_EQ(int64_t(init.size()), t.numel()) << key;
    std::copy(init.begin(), init.end(), t.data());
    f.params.push_back({key, t});
  }
  EXPECT_EQ(f.params.size(), 36u);  // 2 layers x 6 modules x (A, B, m)
  return f;
}

std::vector<float> logits_of(Glm4Model& m) {
  NoGradGuard no_grad;
  std::vector<int32_t> ids;
  for (int i = 0; i < 12; ++i) ids.push_back((i * 37 + 5) % int(m.config.vocab_size));
  ForwardContext ctx;
  ctx.seq = int64_t(ids.size());
  for (int32_t t = 0; t < int32_t(ids.size()); ++t) ctx.positions.push_back(t);
  Tensor logits = m.logits(m.forward_hidden(ids, ctx), ctx);
  return {logits.data(), logits.data() + logits.numel()};
}

// B and m away from their initial values, so the adapter changes every output.
void perturb(Glm4Model& m, uint64_t seed) {
  std::mt19937 rng{uint32_t(seed)};
  std::normal_distribution<float> normal(0.0f, 0.1f);
  for (auto& [name, t] : m.lora_parameters()) {
    if (name.ends_with(".lora_B"))
      for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = normal(rng);
    if (name.ends_with(".lora_magnitude"))
      for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] *= 1.0f + normal(rng);
  }
}

TEST(DoraTrainParity, FirstStepGradientsOfABAndMagnitudeMatchPeft) {
  DoraFixture f = setup();
  std::vector<Batch> micro{testing::fixture_train_batch(*f.file, 0, 0),
                           testing::fixture_train_batch(*f.file, 0, 1)};
  double targets = double(micro[0].target_tokens + micro[1].target_tokens);
  for (const Batch& b : micro)
    backward(batch_loss(*f.model, b, {.divide_by = targets, .training = true}));
  for (auto& [key, t] : f.params) {
    ASSERT_TRUE(t.grad().defined()) << key;
    EXPECT_LE(
        testing::max_relative_error(t.grad().to_vector(), read_f32(f.file->at("grad0." + key))),
        1e-5)
        << key;
  }
}

void run_twenty_steps(bool recompute_layers) {
  DoraFixture f = setup();
  AdamW opt(f.params,
            {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01});
  std::vector<float> losses = read_f32(f.file->at("losses")),
                     norms = read_f32(f.file->at("grad_norms"));
  for (int s = 0; s < 20; ++s) {
    StepOptions o;
    o.lr = 1e-3;
    o.max_grad_norm = 1.0;
    o.recompute_layers = recompute_layers;
    StepResult r = train_step(
        *f.model, opt,
        {testing::fixture_train_batch(*f.file, s, 0), testing::fixture_train_batch(*f.file, s, 1)},
        o);
    EXPECT_NEAR(r.loss, losses[size_t(s)], 1e-5 * std::abs(losses[size_t(s)])) << "step " << s;
    EXPECT_NEAR(r.grad_norm, norms[size_t(s)], 1e-4 * norms[size_t(s)]) << "step " << s;
  }
  for (auto& [key, t] : f.params)
    EXPECT_LE(testing::max_relative_error(t.to_vector(), read_f32(f.file->at("final." + key))),
              1e-4)
        << key;
}

TEST(DoraTrainParity, TwentyStepsMatchTorchAdamW) { run_twenty_steps(false); }
TEST(DoraTrainParity, TwentyStepsMatchWithGradientCheckpointing) { run_twenty_steps(true); }

TEST(Dora, FreshAdapterIsTheBaseAndMagnitudeIsTheRowNorm) {
  auto model = load_model(kData + "/tiny_glm4");
  const std::vector<float> base = logits_of(*model);
  model->add_lora(dora_config(), 7);
  EXPECT_LE(testing::max_relative_error(logits_of(*model), base), 1e-6);
  Linear& q = *model->find_linear("model.layers.0.self_attn.q_proj");
  Tensor w = q.weight.to_f32();
  double row0 = 0;
  for (int64_t k = 0; k < q.in_features; ++k) row0 += double(w.data()[k]) * w.data()[k];
  EXPECT_NEAR(q.lora->magnitude.data()[0], std::sqrt(row0), 1e-6 * std::sqrt(row0));
  perturb(*model, 3);
  EXPECT_GT(testing::max_relative_error(logits_of(*model), base), 1e-2);
}

// Fused W' = m * (W + s B A) / ||W + s B A||_row gives the live adapter's logits.
TEST(Dora, FusedEqualsLive) {
  for (const char* name : {"tiny_glm4", "tiny_glm4_q"}) {
    auto model = load_model(kData + "/" + name);
    model->add_lora(dora_config(), 1);
    perturb(*model, 2);
    const std::vector<float> live = logits_of(*model);
    EXPECT_EQ(merge_adapters(*model, DType::F32), 12);
    EXPECT_TRUE(model->lora_parameters().empty());
    EXPECT_LE(testing::max_relative_error(logits_of(*model), live), 1e-5) << name;
  }
}

// The norm kept between no-grad forwards follows changes to A and B.
TEST(Dora, CachedNormFollowsTheAdapter) {
  auto model = load_model(kData + "/tiny_glm4");
  model->add_lora(dora_config(), 1);
  perturb(*model, 2);
  const std::vector<float> first = logits_of(*model);
  EXPECT_EQ(logits_of(*model), first);
  perturb(*model, 9);
  const std::vector<float> changed = logits_of(*model);
  auto fresh = load_model(kData + "/tiny_glm4");
  fresh->add_lora(dora_config(), 1);
  auto from = model->lora_parameters(), to = fresh->lora_parameters();
  for (size_t i = 0; i < from.size(); ++i)
    std::copy(from[i].second.data(), from[i].second.data() + from[i].second.numel(),
              to[i].second.data());
  EXPECT_EQ(logits_of(*fresh), changed);
  EXPECT_NE(changed, first);
}

TEST(Dora, SavesAndLoadsInPeftAndMlxLayouts) {
  TempDir tmp;
  auto model = load_model(kData + "/tiny_glm4");
  model->add_lora(dora_config(), 4);
  perturb(*model, 5);
  const std::vector<float> live = logits_of(*model);
  for (const char* format : {"peft", "mlx"}) {
    save_adapter(*model, dora_config(), tmp / format, format, "tiny_glm4");
    AdapterInfo info = read_adapter_info(tmp / format);
    EXPECT_TRUE(info.lora.dora) << format;
    auto loaded = load_model(kData + "/tiny_glm4");
    load_adapter(*loaded, tmp / format);
    EXPECT_EQ(logits_of(*loaded), live) << format;
  }
  auto peft = SafetensorsFile::open(tmp / "peft/adapter_model.safetensors");
  EXPECT_EQ(peft->at(kPrefix + "model.layers.1.mlp.down_proj.lora_magnitude_vector").shape,
            (Shape{64}));
  auto mlx = SafetensorsFile::open(tmp / "mlx/adapters.safetensors");
  EXPECT_EQ(read_f32(mlx->at("model.layers.1.mlp.down_proj.m")),
            read_f32(peft->at(kPrefix + "model.layers.1.mlp.down_proj.lora_magnitude_vector")));
  std::ifstream peft_cfg(tmp / "peft/adapter_config.json"),
      mlx_cfg(tmp / "mlx/adapter_config.json");
  EXPECT_EQ(nlohmann::json::parse(peft_cfg)["use_dora"], true);
  EXPECT_EQ(nlohmann::json::parse(mlx_cfg)["fine_tune_type"], "dora");
  convert_adapter(tmp / "mlx", tmp / "back", "peft");
  auto back = SafetensorsFile::open(tmp / "back/adapter_model.safetensors");
  for (const TensorInfo& t : peft->tensors())
    EXPECT_EQ(read_f32(back->at(t.name)), read_f32(t)) << t.name;
}

// DoRA on a bf16 base with bf16 products (where the CPU has them, else f32) and on a 4-bit base:
// training steps run, the loss falls on a repeated batch, and the norm uses the stored weights.
TEST(Dora, TrainsOnBf16ComputeAndQuantizedBases) {
  auto file = SafetensorsFile::open(kData + "/dora_train_glm4/fixture.safetensors");
  for (const char* name : {"tiny_glm4_bf16", "tiny_glm4_q"}) {
    auto model = load_model(kData + "/" + name);
    const bool bf16 = std::string(name) == "tiny_glm4_bf16";
    if (bf16) {
      try {
        apply_compute_flag(*model, "bf16");
      } catch (const Error&) {
        apply_compute_flag(*model, "f32");
      }
    }
    model->add_lora(dora_config(), 2);
    AdamW opt(model->lora_parameters(),
              {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0});
    std::vector<double> losses;
    for (int s = 0; s < 4; ++s) {
      StepOptions o;
      o.lr = 1e-2;
      losses.push_back(
          train_step(*model, opt, {testing::fixture_train_batch(*file, 1, 0)}, o).loss);
      ASSERT_TRUE(std::isfinite(losses.back())) << name;
    }
    EXPECT_LT(losses.back(), losses.front()) << name;
  }
}

// Under dropout the layer is PEFT's x W^T + b + (g - 1) (x_d W^T) + g s (x_d A^T) B^T, written
// out here with the same mask; without training it is g (x V^T) + b whatever the dropout.
TEST(Dora, DropoutFollowsPeftsFormula) {
  auto model = load_model(kData + "/tiny_glm4");
  LoraConfig l = dora_config();
  l.dropout = 0.3;
  model->add_lora(l, 1);
  perturb(*model, 6);
  Linear& lin = *model->find_linear("model.layers.1.self_attn.q_proj");
  const LoraWeights& w = *lin.lora;
  Tensor x = Tensor::from({3, lin.in_features}, testing::randn(size_t(3 * lin.in_features), 11));
  NoGradGuard no_grad;
  ForwardContext ctx;
  ctx.training = true;
  ctx.dropout_seed = 5;
  ctx.layer_index = 1;
  const std::vector<float> ours = lin.forward(x, ctx).to_vector();
  Tensor xd = ops::dropout(x, 0.3f, ctx.seed_for(1, lin.seed_slot));
  std::vector<float> norm = dora_weight_norm(lin.weight, w);
  Tensor W = lin.weight.to_f32();
  const int64_t out = lin.out_features, in = lin.in_features, r = w.lora_A.dim(0);
  double worst = 0, scale = 0;
  std::vector<float> eval_expected;
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t o = 0; o < out; ++o) {
      double base = 0, base_d = 0, low = 0, adapted = 0;
      for (int64_t k = 0; k < in; ++k) {
        base += double(x.data()[t * in + k]) * W.data()[o * in + k];
        base_d += double(xd.data()[t * in + k]) * W.data()[o * in + k];
      }
      for (int64_t j = 0; j < r; ++j) {
        double h = 0, hx = 0;
        for (int64_t k = 0; k < in; ++k) {
          h += double(xd.data()[t * in + k]) * w.lora_A.data()[j * in + k];
          hx += double(x.data()[t * in + k]) * w.lora_A.data()[j * in + k];
        }
        low += h * w.lora_B.data()[o * r + j];
        adapted += hx * w.lora_B.data()[o * r + j];
      }
      const double g = double(w.magnitude.data()[o]) / norm[size_t(o)],
                   b = lin.bias.value.data()[o];
      const double expected = base + b + (g - 1) * base_d + g * w.scale * low;
      worst = std::max(worst, std::abs(expected - ours[size_t(t * out + o)]));
      scale = std::max(scale, std::abs(expected));
      eval_expected.push_back(float(g * (base + w.scale * adapted) + b));
    }
  EXPECT_LE(worst / scale, 1e-5);
  ctx.training = false;
  EXPECT_LE(testing::max_relative_error(lin.forward(x, ctx).to_vector(), eval_expected), 1e-5);
}

// Fusing into a 4-bit base (glm4 fuse without --dequantize) takes DoRA's whole change as the
// delta it re-quantizes, and the written model follows the live one.
TEST(Dora, RequantizedFuseCarriesTheWholeChange) {
  auto model = load_model(kData + "/tiny_glm4_q");
  model->add_lora(dora_config(), 1);
  perturb(*model, 2);
  const std::vector<float> live = logits_of(*model);
  auto base = load_model(kData + "/tiny_glm4_q");
  const double base_gap = testing::max_relative_error(logits_of(*base), live);
  std::vector<ModuleMerge> merged =
      merge_requantized(*model, {.dtype = DType::F32, .min_kept = 0.5});
  ASSERT_EQ(merged.size(), 12u);
  for (const ModuleMerge& m : merged) {
    EXPECT_GT(m.delta_ratio, 0.0) << m.path;
    EXPECT_TRUE(std::isfinite(m.error)) << m.path;
  }
  const double fused_gap = testing::max_relative_error(logits_of(*model), live);
  std::printf("[ dora ] 4-bit fuse: logits rel gap to live %.3g (base: %.3g)\n", fused_gap,
              base_gap);
  EXPECT_LT(fused_gap, 0.5 * base_gap);
}

TEST(Dora, ResidentSlotsRefuseIt) {
  TempDir tmp;
  auto model = load_model(kData + "/tiny_glm4");
  model->add_lora(dora_config(), 4);
  save_adapter(*model, dora_config(), tmp / "a", "peft", "");
  auto serving = load_model(kData + "/tiny_glm4");
  EXPECT_TRUE(
      throws_with([&] { load_resident_adapter(*serving, tmp / "a", 0); }, {"DoRA", "fuse"}));
  LoraConfig plain = dora_config();
  plain.dora = false;
  EXPECT_TRUE(
      throws_with([&] { save_adapter(*model, plain, tmp / "b", "peft", ""); }, {"DoRA", "q_proj"}));
}

}  // namespace
}  // namespace glm4
