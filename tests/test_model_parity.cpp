// The model computes what the PyTorch reference (tools/reference/reference.py) computes: logits
// and every layer's hidden states, for each family, batch 2 with right padding, 160 tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "autograd/node.h"
#include "base/check.h"
#include "io/safetensors.h"
#include "model/compute_choice.h"
#include "model/glm4_model.h"

namespace glm4 {
namespace {

struct Fixture {
  std::vector<int32_t> ids, lengths;
  int64_t B, T;
  std::shared_ptr<SafetensorsFile> file;
};

Fixture read_fixture(const std::string& dir) {
  Fixture f;
  f.file = SafetensorsFile::open(dir + "/fixture.safetensors");
  const TensorInfo& ids = f.file->at("input_ids");
  f.B = ids.shape[0];
  f.T = ids.shape[1];
  for (int64_t v : read_int(ids)) f.ids.push_back(int32_t(v));
  for (int64_t v : read_int(f.file->at("lengths"))) f.lengths.push_back(int32_t(v));
  return f;
}

// max |a - b| over valid positions, relative to max |b| there.
double relative_error(const float* a, const std::vector<float>& b, const Fixture& f,
                      int64_t width) {
  double worst = 0, scale = 0;
  for (int64_t bi = 0; bi < f.B; ++bi)
    for (int64_t t = 0; t < f.lengths[bi]; ++t)
      for (int64_t j = 0; j < width; ++j) {
        size_t i = size_t((bi * f.T + t) * width + j);
        worst = std::max(worst, double(std::abs(a[i] - b[i])));
        scale = std::max(scale, double(std::abs(b[i])));
      }
  return worst / scale;
}

class ModelParity : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelParity, LogitsAndHiddenStatesMatchTheReference) {
  std::string dir = std::string(GLM4_TEST_DATA) + "/" + GetParam();
  auto model = load_model(dir);
  Fixture f = read_fixture(dir);
  NoGradGuard no_grad;
  ForwardContext ctx;
  ctx.batch = f.B;
  ctx.seq = f.T;
  for (int64_t b = 0; b < f.B; ++b)
    for (int64_t t = 0; t < f.T; ++t) ctx.positions.push_back(int32_t(t));
  ctx.mask.kv_end = f.lengths;
  std::vector<Tensor> layers;
  ctx.layer_outputs = &layers;
  Tensor hidden = model->forward_hidden(f.ids, ctx);
  Tensor logits = model->logits(hidden, ctx);
  int64_t H = model->config.hidden_size, V = model->config.vocab_size;
  ASSERT_EQ(layers.size(), size_t(model->config.num_hidden_layers));
  for (size_t l = 0; l < layers.size(); ++l)
    EXPECT_LE(
        relative_error(layers[l].data(), read_f32(f.file->at("hidden." + std::to_string(l))), f, H),
        1e-5)
        << "hidden." << l;
  EXPECT_LE(relative_error(hidden.data(), read_f32(f.file->at("hidden.final")), f, H), 1e-5);
  EXPECT_LE(relative_error(logits.data(), read_f32(f.file->at("logits")), f, V), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Families, ModelParity,
                         ::testing::Values("tiny_glm4", "tiny_glm", "tiny_chatglm",
                                           "tiny_glm4_bf16", "tiny_glm4_q"));

// Largest |ours - fp64 reference| over valid positions, absolute.
double max_abs_error(const float* a, const std::vector<float>& b, const Fixture& f, int64_t width) {
  double worst = 0;
  for (int64_t bi = 0; bi < f.B; ++bi)
    for (int64_t t = 0; t < f.lengths[bi]; ++t)
      for (int64_t j = 0; j < width; ++j) {
        size_t i = size_t((bi * f.T + t) * width + j);
        worst = std::max(worst, double(std::abs(a[i] - b[i])));
      }
  return worst;
}

// bf16 compute is no less accurate than PyTorch's bf16: its logits are at most twice as far from
// the fp64 reference as PyTorch's own bf16 forward (transformers' dtype rules) is.
TEST(Bf16Compute, LogitsWithinTwiceTorchBf16OfTheFp64Reference) {
  const std::string dir = std::string(GLM4_TEST_DATA) + "/tiny_glm4_bf16";
  auto model = load_model(dir);
  ComputeChoice choice;
  try {
    choice = apply_compute_flag(*model, "bf16");
  } catch (const Error& e) {
    GTEST_SKIP() << "no native bf16 on this CPU: " << e.what();
  }
  Fixture f = read_fixture(dir);
  auto logits_of = [&] {
    NoGradGuard no_grad;
    ForwardContext ctx;
    ctx.batch = f.B;
    ctx.seq = f.T;
    for (int64_t b = 0; b < f.B; ++b)
      for (int64_t t = 0; t < f.T; ++t) ctx.positions.push_back(int32_t(t));
    ctx.mask.kv_end = f.lengths;
    return model->logits(model->forward_hidden(f.ids, ctx), ctx);
  };
  Tensor bf16 = logits_of();
  model->compute = kF32Compute;
  Tensor f32 = logits_of();
  const int64_t V = model->config.vocab_size;
  std::vector<float> ref = read_f32(f.file->at("logits")),
                     torch = read_f32(f.file->at("logits_torch_bf16"));
  const double ours = max_abs_error(bf16.data(), ref, f, V),
               theirs = max_abs_error(torch.data(), ref, f, V);
  std::printf("[ bf16 ] %s: max |logit - fp64| ours %.3g, PyTorch bf16 %.3g, ours in f32 %.3g\n",
              choice.describe().c_str(), ours, theirs, max_abs_error(f32.data(), ref, f, V));
  EXPECT_LE(ours, 2 * theirs);
  if (choice.bf16_units_on()) {
    EXPECT_GT(ours, max_abs_error(f32.data(), ref, f, V));  // the bf16 kernels did run
  } else {  // a VNNI CPU without bf16 units: bf16 weights stay on the fp32 products
    EXPECT_EQ(bf16.to_vector(), f32.to_vector());
  }
}

TEST(ModelLoading, Bf16WeightsStayBf16InMemory) {
  auto model = load_model(std::string(GLM4_TEST_DATA) + "/tiny_glm4_bf16");
  int64_t matrices = 0;
  model->visit([&](const std::string& name, Param& p) {
    if (!p.is_matrix()) return;
    ++matrices;
    EXPECT_EQ(p.frozen.dtype(), DType::BF16) << name;
    EXPECT_FALSE(p.value.defined()) << name;
  });
  EXPECT_EQ(matrices, 2 + 2 * 6);
}

}  // namespace
}  // namespace glm4
