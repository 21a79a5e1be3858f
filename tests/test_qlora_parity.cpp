// QLoRA matches PyTorch on the dequantized base: fp32 LoRA over the frozen 2-8 bit base of
// tiny_glm4_q (tools/reference/quant_model_reference.py), the lora_train_glm4 run's adapters and
// batches: first-step gradients and a 20-step loss curve, with and without gradient checkpointing.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/kernels/quant_linear.h"
#include "autograd/node.h"
#include "base/check.h"
#include "infer/score.h"
#include "io/safetensors.h"
#include "model/compute_choice.h"
#include "model/glm4_model.h"
#include "tests/support/fixture_logits.h"
#include "tests/support/reference_batches.h"
#include "train/train_step.h"

namespace glm4 {
namespace {

const std::string kData = GLM4_TEST_DATA;

struct QloraFixture {
  std::shared_ptr<SafetensorsFile> run,
      ref;  // batches and init (lora_train_glm4), results (tiny_glm4_q)
  std::unique_ptr<Glm4Model> model;
  std::vector<std::pair<std::string, Tensor>> params;
};

QloraFixture setup() {
  QloraFixture f;
  f.run = SafetensorsFile::open(kData + "/lora_train_glm4/fixture.safetensors");
  f.ref = SafetensorsFile::open(kData + "/tiny_glm4_q/qlora.safetensors");
  f.model = load_model(kData + "/tiny_glm4_q");
  LoraConfig lora;
  lora.rank = 4;
  lora.alpha = 8;
  lora.targets = {"all-linear"};
  f.model->add_lora(lora, 0);
  for (auto& [name, t] : f.model->lora_parameters()) {
    const std::string key = "base_model.model." + name + ".weight";
    std::vector<float> init = read_f32(f.run->at("init." + key));
    EXPECT_EQ(int64_t(init.size()), t.numel()) << key;
    std::copy(init.begin(), init.end(), t.data());
    f.params.push_back({key, t});
  }
  EXPECT_EQ(f.params.size(), 24u);
  return f;
}

TEST(QloraParity, FirstStepGradientsMatchTorchOnTheDequantizedBase) {
  QloraFixture f = setup();
  std::vector<Batch> micro{testing::fixture_train_batch(*f.run, 0, 0),
                           testing::fixture_train_batch(*f.run, 0, 1)};
  const double targets = double(micro[0].target_tokens + micro[1].target_tokens);
  for (const Batch& b : micro)
    backward(batch_loss(*f.model, b, {.divide_by = targets, .training = true}));
  for (auto& [key, t] : f.params) {
    ASSERT_TRUE(t.grad().defined()) << key;
    EXPECT_LE(testing::max_relative_error(t.grad(), read_f32(f.ref->at("grad0." + key))), 1e-4)
        << key;
  }
  // The frozen quantized base got no gradient and stayed quantized.
  f.model->visit_linears([&](const LinearSite& site, Linear& l) {
    if (site.path != "lm_head") {
      EXPECT_TRUE(l.weight.frozen.is_quantized()) << site.path;
    }
    EXPECT_FALSE(l.weight.value.defined()) << site.path;
  });
}

// Returns the largest |loss - reference| over 20 steps with the model's products under `compute`.
double run_twenty_steps(bool recompute_layers, double tolerance,
                        const std::string& compute = "f32") {
  QloraFixture f = setup();
  apply_compute_flag(*f.model, compute);
  std::vector<std::pair<std::string, Tensor>> named(f.params.begin(), f.params.end());
  AdamW opt(named, {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01});
  const std::vector<float> losses = read_f32(f.ref->at("losses")),
                           norms = read_f32(f.ref->at("grad_norms"));
  double worst = 0;
  for (int s = 0; s < 20; ++s) {
    StepOptions o;
    o.lr = 1e-3;
    o.max_grad_norm = 1.0;
    o.recompute_layers = recompute_layers;
    StepResult r = train_step(
        *f.model, opt,
        {testing::fixture_train_batch(*f.run, s, 0), testing::fixture_train_batch(*f.run, s, 1)},
        o);
    worst = std::max(worst, std::abs(r.loss - double(losses[size_t(s)])));
    EXPECT_NEAR(r.loss, losses[s], tolerance * std::abs(losses[s])) << "step " << s;
    EXPECT_NEAR(r.grad_norm, norms[s], 10 * tolerance * norms[s]) << "step " << s;
  }
  if (tolerance <= 1e-4) {
    for (auto& [key, t] : f.params) {
      EXPECT_LE(testing::max_relative_error(t, read_f32(f.ref->at("final." + key))), 1e-4) << key;
    }
  }
  return worst;
}

TEST(QloraParity, TwentyStepsMatchTorchAdamW) { run_twenty_steps(false, 1e-4); }
TEST(QloraParity, TwentyStepsMatchWithGradientCheckpointing) { run_twenty_steps(true, 1e-4); }

// Under --compute bf16 the prefill-sized products run on bf16 units (dequantized panels), or on
// an AVX512-VNNI or AVX2 CPU without them on the int8 GEMM, and the saved activations are bf16;
// the curve stays close to the fp64 one.
TEST(QloraParity, Bf16ComputeLossCurveStaysClose) {
  if (kernels::bf16_kernel() == kernels::Bf16Kernel::kNone && !quant_int8_available())
    GTEST_SKIP() << "neither bf16 units (AMX or AVX512-BF16) nor int8 kernels on this CPU";
  const double worst = run_twenty_steps(true, 5e-3, "bf16");
  std::printf("[ qlora bf16 ] 20-step loss curve: max |loss - fp64| %.3g\n", worst);
  EXPECT_GT(worst, 0.0);
}

}  // namespace
}  // namespace glm4
