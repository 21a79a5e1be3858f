// Loading and creating glm4_moe_lite checkpoints: the latent attention keys and shapes, the
// strict key check naming a missing one, glm4 init's random model read back the same, the
// router masking dropped groups to -inf (where glm4_moe's 0.0 would pick them) and the chat
// format. (GGUF export of the family: test_gguf_export_lite.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "autograd/node.h"
#include "io/safetensors.h"
#include "io/tokenizer/chat_template.h"
#include "model/glm4_model.h"
#include "model/moe_router.h"
#include "model/save.h"
#include "tests/support/expect_error.h"
#include "tests/support/fixture_logits.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

namespace fs = std::filesystem;
std::string lite_dir(const std::string& name) {
  return std::string(GLM4_TEST_DATA) + "/moe_lite/" + name;
}

std::vector<float> logits_of(const Glm4Model& m) { return testing::short_prompt_logits(m); }

std::map<std::string, Shape> param_shapes(Glm4Model& m) {
  std::map<std::string, Shape> out;
  m.visit([&](const std::string& name, Param& p) { out[name] = p.shape; });
  return out;
}

TEST(MoeLiteLoad, LatentAttentionKeysAndShapes) {
  auto a = load_model(lite_dir("tiny_lite"));  // q_lora_rank 24, v 10, bias
  auto s = param_shapes(*a);
  const std::string p = "model.layers.0.self_attn.";
  EXPECT_EQ(s.at(p + "q_a_proj.weight"), (Shape{24, 32}));
  EXPECT_EQ(s.at(p + "q_a_proj.bias"), (Shape{24}));
  EXPECT_EQ(s.at(p + "q_a_layernorm.weight"), (Shape{24}));
  EXPECT_EQ(s.at(p + "q_b_proj.weight"), (Shape{4 * 12, 24}));
  EXPECT_EQ(s.at(p + "kv_a_proj_with_mqa.weight"), (Shape{16 + 4, 32}));
  EXPECT_EQ(s.at(p + "kv_a_layernorm.weight"), (Shape{16}));
  EXPECT_EQ(s.at(p + "kv_b_proj.weight"), (Shape{4 * (8 + 10), 16}));
  EXPECT_EQ(s.at(p + "o_proj.weight"), (Shape{32, 4 * 10}));
  EXPECT_EQ(s.at(p + "o_proj.bias"), (Shape{32}));
  EXPECT_EQ(s.count(p + "q_proj.weight"), 0u);
  auto b = load_model(lite_dir("tiny_lite_plain"));  // q_lora_rank null, v 16, no bias
  auto t = param_shapes(*b);
  EXPECT_EQ(t.at(p + "q_proj.weight"), (Shape{4 * 12, 32}));
  EXPECT_EQ(t.count(p + "q_a_proj.weight"), 0u);
  EXPECT_EQ(t.count(p + "o_proj.bias"), 0u);
  EXPECT_EQ(t.at(p + "o_proj.weight"), (Shape{32, 4 * 16}));
}

TEST(MoeLiteLoad, MissingLatentKeyIsNamed) {
  testing::TempDir tmp;
  fs::copy_file(lite_dir("tiny_lite") + "/config.json", tmp / "config.json");
  auto file = SafetensorsFile::open(lite_dir("tiny_lite") + "/model.safetensors");
  std::vector<TensorToWrite> w;
  for (const TensorInfo& t : file->tensors())
    if (t.name != "model.layers.1.self_attn.kv_b_proj.weight")
      w.push_back({t.name, t.dtype, t.shape, t.data, t.nbytes});
  write_safetensors(tmp / "model.safetensors", w);
  testing::expect_error([&] { load_model(tmp.path()); },
                        "missing keys (1):\n  model.layers.1.self_attn.kv_b_proj.weight");
}

// glm4 init's path: random weights in the checkpoint's key layout, read back equal.
TEST(MoeLiteLoad, InitSaveLoadRoundTrip) {
  const ModelConfig c = load_model_config(lite_dir("tiny_lite"));
  Glm4Model model(c);
  init_random(model, 7, DType::BF16);
  testing::TempDir tmp;
  save_model(model, tmp.path(), DType::BF16);
  auto file = SafetensorsFile::open(tmp / "model.safetensors");
  EXPECT_EQ(file->at("model.layers.2.self_attn.kv_b_proj.weight").dtype, "BF16");
  for (float v : read_f32(file->at("model.layers.0.self_attn.kv_a_layernorm.weight")))
    EXPECT_EQ(v, 1.0f);
  auto back = load_model(tmp.path());
  ModelConfig expected = c;
  expected.num_nextn_predict_layers = 0;
  expected.torch_dtype = DType::BF16;
  EXPECT_EQ(back->config, expected);
  EXPECT_EQ(logits_of(*back), logits_of(model));
}

// Groups {0,1} {2,3} {4,5} {6,7}, keep 2, top 3: the kept groups' choices are all below 0 after
// the bias; glm4_moe's 0.0 mask lets a dropped expert win, glm4_moe_lite's -inf never does.
TEST(MoeLiteRouter, DroppedGroupsAreMaskedToMinusInfinity) {
  const std::vector<float> scores{0.6f, 0.5f, 0.55f, 0.3f, 0.1f, 0.1f, 0.2f, 0.01f};
  const std::vector<float> bias(8, -0.7f);
  RouterSettings moe{8, 3, 4, 2, true, 1.0};
  RouterSettings lite = moe;
  lite.dropped_groups_neg_inf = true;
  EXPECT_EQ(select_experts(scores.data(), 1, bias.data(), lite).experts,
            (std::vector<int32_t>{0, 2, 1}));
  EXPECT_EQ(select_experts(scores.data(), 1, bias.data(), moe).experts[0], 4);  // 0.0 > -0.1
  const ModelConfig c = load_model_config(lite_dir("tiny_lite"));
  EXPECT_TRUE(RouterSettings::of(c).dropped_groups_neg_inf);
}

// A GLM-4.7-Flash directory without a chat template of its own chats in the GLM-4.7 format.
TEST(MoeLiteLoad, ModelTypeChoosesTheGlm47ChatFormat) {
  testing::TempDir tmp;
  fs::copy_file(lite_dir("tiny_lite") + "/config.json", tmp / "config.json");
  EXPECT_EQ(chat_format_of_model_dir(tmp.path()), ChatFormat::Glm47);
}

}  // namespace
}  // namespace glm4
