// LoRA on glm4_moe_lite matches PyTorch + PEFT + torch.optim.AdamW (tests/data/moe_lite/
// lora_train_lite, tools/reference/moe_lite_reference.py): an adapter on every latent attention
// projection, the dense MLP, the shared and every routed expert; its logits, the first step's
// loss and every gradient, and 20 steps of clipping and AdamW (with and without gradient
// checkpointing), where an expert no token reaches has no gradient and AdamW skips it; fused into
// the weights and written as a checkpoint, the adapter gives the same logits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "autograd/node.h"
#include "infer/merge.h"
#include "infer/score.h"
#include "io/safetensors.h"
#include "model/adapter/adapter_io.h"
#include "model/glm4_model.h"
#include "model/save.h"
#include "tests/support/reference_batches.h"
#include "tests/support/temp_dir.h"
#include "train/adamw.h"
#include "train/train_step.h"

namespace glm4 {
namespace {

const std::string kPrefix = "base_model.model.";
std::string dir_of(const std::string& name) {
  return std::string(GLM4_TEST_DATA) + "/moe_lite/" + name;
}

struct LoraFixture {
  std::shared_ptr<SafetensorsFile> file;
  std::unique_ptr<Glm4Model> model;
  std::vector<std::pair<std::string, Tensor>> params;  // PEFT key -> our tensor
  std::vector<int64_t> hits;                           // [step, MoE layer, expert]
  int64_t moe_layers = 0, experts = 0;

  // Whether the routed expert a PEFT key belongs to got a token at `step` (true for the rest).
  bool reached(const std::string& key, int64_t step) const {
    int layer = -1, expert = -1;
    if (std::sscanf(key.c_str(), "base_model.model.model.layers.%d.mlp.experts.%d.", &layer,
                    &expert) != 2)
      return true;
    const int64_t l = layer - model->config.first_k_dense_replace;
    return hits[size_t((step * moe_layers + l) * experts + expert)] > 0;
  }
};

LoraFixture setup() {
  LoraFixture f;
  f.file = SafetensorsFile::open(dir_of("lora_train_lite") + "/fixture.safetensors");
  f.model = load_model(dir_of("tiny_lite"));
  load_adapter(*f.model, dir_of("lora_train_lite"));
  for (auto& [name, t] : f.model->lora_parameters())
    f.params.push_back({kPrefix + name + ".weight", t});
  EXPECT_EQ(f.params.size(), 240u);
  const TensorInfo& h = f.file->at("expert_hits");
  f.hits = read_int(h);
  f.moe_layers = h.shape[1];
  f.experts = h.shape[2];
  return f;
}

// The logits of adapter_input_ids through `model`, worst |ours - fixture| over valid positions.
double adapted_logits_error(const Glm4Model& model, const SafetensorsFile& file) {
  const TensorInfo& ids_info = file.at("adapter_input_ids");
  const int64_t B = ids_info.shape[0], T = ids_info.shape[1], V = model.config.vocab_size;
  std::vector<int32_t> ids, lengths;
  for (int64_t v : read_int(ids_info)) ids.push_back(int32_t(v));
  for (int64_t v : read_int(file.at("adapter_lengths"))) lengths.push_back(int32_t(v));
  NoGradGuard no_grad;
  ForwardContext ctx;
  ctx.batch = B;
  ctx.seq = T;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) ctx.positions.push_back(int32_t(t));
  ctx.mask.kv_end = lengths;
  const Tensor logits = model.logits(model.forward_hidden(ids, ctx), ctx);
  const std::vector<float> want = read_f32(file.at("adapter_logits"));
  double worst = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < lengths[size_t(b)]; ++t)
      for (int64_t v = 0; v < V; ++v) {
        const size_t i = size_t((b * T + t) * V + v);
        worst = std::max(worst, double(std::abs(logits.data()[i] - want[i])));
      }
  return worst;
}

TEST(MoeLiteLoraParity, AdaptedLogitsMatchTheReference) {
  LoraFixture f = setup();
  EXPECT_LE(adapted_logits_error(*f.model, *f.file), 2e-6);
}

// glm4 fuse's path: every adapter merged (fp32), the model written and read back.
TEST(MoeLiteLoraParity, FusedCheckpointKeepsTheAdaptedLogits) {
  LoraFixture f = setup();
  EXPECT_EQ(merge_adapters(*f.model, DType::F32), 120);
  testing::TempDir tmp;
  save_model(*f.model, tmp.path(), DType::F32);
  auto fused = load_model(tmp.path());
  EXPECT_TRUE(fused->lora_parameters().empty());
  EXPECT_LE(adapted_logits_error(*fused, *f.file), 2e-6);
}

TEST(MoeLiteLoraParity, FirstStepLossAndGradientsMatchPeft) {
  LoraFixture f = setup();
  Tensor loss =
      batch_loss(*f.model, testing::fixture_train_batch(*f.file, 0, 0), {.training = true});
  backward(loss);
  const double want_loss = read_f32(f.file->at("losses"))[0];
  EXPECT_NEAR(double(loss.item()), want_loss, 1e-5 * want_loss);
  double worst = 0;
  int64_t without = 0;
  for (auto& [key, t] : f.params) {
    ASSERT_EQ(t.grad().defined(), f.reached(key, 0)) << key;
    if (!t.grad().defined()) {
      ++without;
      continue;
    }
    const double e = testing::max_relative_error(t.grad(), read_f32(f.file->at("grad0." + key)));
    EXPECT_LE(e, 1e-4) << key;
    worst = std::max(worst, e);
  }
  EXPECT_GT(without, 0);
  std::printf("[ moe lite lora ] loss %.8f (fp64 %.8f); %zu gradients, worst relative error %.3g\n",
              double(loss.item()), want_loss, f.params.size(), worst);
}

void run_twenty_steps(bool recompute_layers) {
  LoraFixture f = setup();
  AdamW opt(f.params,
            {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01});
  const std::vector<float> losses = read_f32(f.file->at("losses")),
                           norms = read_f32(f.file->at("grad_norms"));
  ASSERT_EQ(losses.size(), 20u);
  double worst_loss = 0;
  for (int s = 0; s < 20; ++s) {
    StepOptions o;
    o.lr = 1e-3;
    o.max_grad_norm = 1.0;
    o.recompute_layers = recompute_layers;
    const StepResult r =
        train_step(*f.model, opt, {testing::fixture_train_batch(*f.file, s, 0)}, o);
    worst_loss = std::max(worst_loss, std::abs(r.loss - losses[size_t(s)]));
    EXPECT_NEAR(r.loss, losses[size_t(s)], 1e-4) << "step " << s;
    EXPECT_NEAR(r.grad_norm, norms[size_t(s)], 1e-4 * norms[size_t(s)]) << "step " << s;
  }
  double worst_param = 0;
  for (size_t i = 0; i < f.params.size(); ++i) {
    const auto& [key, t] = f.params[i];
    const double e = testing::max_relative_error(t, read_f32(f.file->at("final." + key)));
    EXPECT_LE(e, 1e-4) << key;
    worst_param = std::max(worst_param, e);
    int64_t steps = 0;
    for (int s = 0; s < 20; ++s) steps += f.reached(key, s);
    EXPECT_EQ(opt.param_steps()[i], steps) << key;
  }
  std::printf(
      "[ moe lite lora ] 20 AdamW steps%s: max |loss - fp64| %.3g, final adapters rel %.3g\n",
      recompute_layers ? " (gradient checkpointing)" : "", worst_loss, worst_param);
}

// all-linear on latent attention adapts q_a/q_b/kv_a/kv_b/o and the MLPs; the adapter written
// lists those (no k_proj / v_proj, which this attention has not) and loads back to the same
// logits. It once listed k_proj and v_proj, and loading it failed on them.
TEST(MoeLiteLora, AllLinearAdapterSavesAndLoadsBack) {
  std::unique_ptr<Glm4Model> trained = load_model(dir_of("tiny_lite"));
  LoraConfig lora;
  lora.rank = 4;
  lora.alpha = 8;
  lora.targets = {"all-linear"};
  trained->add_lora(lora, 7);
  for (auto& [name, t] : trained->lora_parameters()) {  // B != 0, so the adapter changes logits
    float* p = t.data();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] += 0.01f * float((i * 7 + 3) % 11) - 0.05f;
  }
  testing::TempDir tmp;
  save_adapter(*trained, lora, tmp / "adapter", "peft", dir_of("tiny_lite"));
  std::ifstream in(tmp / "adapter" / "adapter_config.json");
  const std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(config.find("\"k_proj\""), std::string::npos) << config;
  EXPECT_EQ(config.find("\"v_proj\""), std::string::npos) << config;
  EXPECT_NE(config.find("\"kv_b_proj\""), std::string::npos) << config;

  std::unique_ptr<Glm4Model> loaded = load_model(dir_of("tiny_lite"));
  load_adapter(*loaded, tmp / "adapter");
  auto logits_of = [](const Glm4Model& model) {
    const std::vector<int32_t> ids{5, 9, 2, 17, 3};
    NoGradGuard no_grad;
    ForwardContext ctx;
    ctx.batch = 1;
    ctx.seq = 5;
    ctx.positions = {0, 1, 2, 3, 4};
    return model.logits(model.forward_hidden(ids, ctx), ctx).to_vector();
  };
  const std::vector<float> want = logits_of(*trained), got = logits_of(*loaded);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(want[i], got[i]) << i;
}

// An adapter on the latent attention alone (no MLP target, nothing else that says glm4_moe)
// loads: PEFT writes such adapters for GLM-4.7-Flash.
TEST(MoeLiteLora, AttentionOnlyAdapterLoads) {
  std::unique_ptr<Glm4Model> trained = load_model(dir_of("tiny_lite"));
  LoraConfig lora;
  lora.rank = 2;
  lora.alpha = 4;
  lora.targets = {"kv_a_proj_with_mqa", "kv_b_proj", "o_proj"};
  trained->add_lora(lora, 3);
  testing::TempDir tmp;
  save_adapter(*trained, lora, tmp / "adapter", "peft", dir_of("tiny_lite"));
  std::unique_ptr<Glm4Model> loaded = load_model(dir_of("tiny_lite"));
  const std::string warning = load_adapter(*loaded, tmp / "adapter");
  EXPECT_EQ(loaded->lora_parameters().size(), trained->lora_parameters().size()) << warning;
}

TEST(MoeLiteLoraParity, TwentyStepsMatchTorchAdamW) { run_twenty_steps(false); }
TEST(MoeLiteLoraParity, TwentyStepsMatchWithGradientCheckpointing) { run_twenty_steps(true); }

}  // namespace
}  // namespace glm4
