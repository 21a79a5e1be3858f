// Fusing LoRA into the weights and saving a model directory: merged logits equal the live
// adapter's, and a saved model reloads to the same logits under the base checkpoint's keys.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/node.h"
#include "base/check.h"
#include "infer/merge.h"
#include "io/model_files.h"
#include "io/safetensors.h"
#include "support/temp_dir.h"
#include "tests/support/fixture_logits.h"
#include "tests/support/random_adapter.h"

namespace glm4 {
namespace {

std::string dir_of(const std::string& name) { return std::string(GLM4_TEST_DATA) + "/" + name; }

std::vector<float> fixture_logits(const Glm4Model& model, const std::string& name) {
  return testing::fixture_batch_logits(model, dir_of(name) + "/fixture.safetensors");
}
using testing::max_relative_error;

// Adds adapters to every linear of every layer, with B random so they change the output.
void add_random_lora(Glm4Model& model) {
  LoraConfig lora;
  lora.rank = 4;
  lora.alpha = 8;
  lora.targets = {"all-linear"};
  ASSERT_EQ(model.add_lora(lora, 11), 6 * model.config.num_hidden_layers);
  testing::randomize_lora_b(model, 3, 0.2f);
}

std::map<std::string, std::vector<int64_t>> key_shapes(const std::filesystem::path& dir,
                                                       std::string* dtype = nullptr) {
  ModelFiles files = ModelFiles::open(dir);
  std::map<std::string, std::vector<int64_t>> out;
  for (const std::string& k : files.keys()) {
    out[k] = files.at(k).shape;
    if (dtype) *dtype = files.at(k).dtype;
  }
  return out;
}

class MergeAndSave : public ::testing::TestWithParam<std::string> {};

TEST_P(MergeAndSave, MergedEqualsLiveAdapterAndSavedModelReloads) {
  const std::string name = GetParam();
  auto model = load_model(dir_of(name));
  std::vector<float> base = fixture_logits(*model, name);
  add_random_lora(*model);
  std::vector<float> live = fixture_logits(*model, name);
  ASSERT_GT(max_relative_error(live, base), 1e-2) << "the adapter must change the output";

  EXPECT_EQ(merge_adapters(*model, DType::F32), 6 * model->config.num_hidden_layers);
  EXPECT_EQ(model->lora_parameters().size(), 0u);
  std::vector<float> merged = fixture_logits(*model, name);
  EXPECT_LE(max_relative_error(merged, live), 1e-5);

  testing::TempDir tmp;
  save_model(*model, model->config, tmp.path(), DType::F32, 0);
  auto reloaded = load_model(tmp.path());
  EXPECT_EQ(fixture_logits(*reloaded, name), merged);  // f32 round trip: bit-exact
  EXPECT_EQ(reloaded->config, model->config);
  std::string dtype;
  EXPECT_EQ(key_shapes(tmp.path(), &dtype), key_shapes(dir_of(name)));
  EXPECT_EQ(dtype, "F32");
  if (model->config.family == ModelConfig::Family::ChatGlm) {
    EXPECT_EQ(key_shapes(tmp.path())
                  .count("transformer.encoder.layers.0.self_attention.query_key_value.weight"),
              1u);
    // The derived RoPE buffer is written as the reference code computes it.
    const std::string key = "transformer.rotary_pos_emb.inv_freq";
    std::vector<float> want = read_f32(ModelFiles::open(dir_of(name)).at(key));
    std::vector<float> got = read_f32(ModelFiles::open(tmp.path()).at(key));
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-7 * want[i]) << i;
  }
}

TEST_P(MergeAndSave, Bf16ShardedSaveRoundsOnceAndReloads) {
  const std::string name = GetParam();
  auto model = load_model(dir_of(name));
  add_random_lora(*model);
  std::vector<float> live = fixture_logits(*model, name);
  merge_adapters(*model, DType::BF16);
  testing::TempDir tmp;
  save_model(*model, model->config, tmp.path(), DType::BF16, 64 * 1024);
  EXPECT_TRUE(std::filesystem::exists(tmp / "model.safetensors.index.json"));
  auto reloaded = load_model(tmp.path());
  EXPECT_EQ(reloaded->config.torch_dtype, DType::BF16);
  std::string dtype;
  EXPECT_EQ(key_shapes(tmp.path(), &dtype), key_shapes(dir_of(name)));
  EXPECT_EQ(dtype, "BF16");
  const std::vector<float> saved_logits = fixture_logits(*reloaded, name);
  EXPECT_GT(max_relative_error(saved_logits, live), 0.0);  // the weights were rounded
  // Every saved value is the bf16 rounding of the fp32 merge's value: rounded once.
  auto exact = load_model(dir_of(name));
  add_random_lora(*exact);
  merge_adapters(*exact, DType::F32);
  std::map<std::string, std::vector<float>> want;
  exact->visit([&](const std::string& key, Param& p) {
    for (float v : p.to_f32().to_vector()) want[key].push_back(bf16_to_f32(f32_to_bf16(v)));
  });
  reloaded->visit([&](const std::string& key, Param& p) {
    if (p.is_matrix()) {
      EXPECT_EQ(p.frozen.dtype(), DType::BF16) << key;
    }
    EXPECT_EQ(p.to_f32().to_vector(), want[key]) << key;
  });
  // And the reloaded model computes what the fp32 merge does once its values are so rounded (in
  // fp32 storage, so only the summation order of the products may differ): how far that lies
  // from the live adapter is bf16's doing, not the save's, and depends on the random draw.
  exact->visit([&](const std::string& key, Param& p) {
    if (p.is_matrix())
      p.assign(Weight::from_f32(want[key].data(), p.shape[0], p.shape[1], DType::F32));
    else
      p.value = Tensor::from(p.shape, want[key]);
  });
  EXPECT_LE(max_relative_error(saved_logits, fixture_logits(*exact, name)), 1e-5);
  // Saving the merged model again reproduces the same bytes (no second rounding).
  testing::TempDir again;
  save_model(*reloaded, reloaded->config, again.path(), DType::BF16, 0);
  ModelFiles a = ModelFiles::open(tmp.path()), b = ModelFiles::open(again.path());
  ASSERT_EQ(a.keys(), b.keys());
  for (const std::string& k : a.keys()) {
    const TensorInfo &x = a.at(k), &y = b.at(k);
    ASSERT_EQ(x.nbytes, y.nbytes) << k;
    EXPECT_EQ(std::memcmp(x.data, y.data, x.nbytes), 0) << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, MergeAndSave, ::testing::Values("tiny_glm4", "tiny_chatglm"));

TEST(SaveModel, RefusesLiveAdaptersAndMismatchedConfigs) {
  auto model = load_model(dir_of("tiny_glm4"));
  testing::TempDir tmp;
  ModelConfig other = model->config;
  other.num_hidden_layers = 1;
  EXPECT_TRUE(testing::throws_with([&] { save_model(*model, other, tmp.path(), DType::F32); },
                                   {"does not describe"}));
  add_random_lora(*model);
  EXPECT_TRUE(testing::throws_with(
      [&] { save_model(*model, model->config, tmp.path(), DType::F32); }, {"LoRA", "merge"}));
}

}  // namespace
}  // namespace glm4
