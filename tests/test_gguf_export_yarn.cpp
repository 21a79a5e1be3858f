// GGUF export of YaRN models: llama.cpp's rope.scaling keys (glm4, glm4moe, deepseek2 with its
// yarn_log_multiplier), or a refusal naming rope_scaling where llama.cpp would compute otherwise.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "export/gguf_export.h"
#include "model/glm4_model.h"
#include "support/temp_dir.h"
#include "tests/support/expect_error.h"
#include "tests/support/gguf_reader.h"

namespace glm4 {
namespace {

using glm4::testing::error_of;
using glm4::testing::TempDir;

std::string yarn_dir(const std::string& name) {
  return std::string(GLM4_TEST_DATA) + "/yarn/" + name;
}

// The model (read from tests/data/yarn/<name>) exported as F32 into dir, and read back.
std::shared_ptr<GgufFile> exported(Glm4Model& model, const std::string& name, const TempDir& dir) {
  export_gguf_model(model, yarn_dir(name), dir / "m.gguf", GgmlType::F32);
  return GgufFile::open(dir / "m.gguf");
}

// What the export of the model says when it refuses it ("" if it does not).
std::string export_refusal(Glm4Model& model, const std::string& name, const TempDir& dir) {
  return error_of([&] { export_gguf_model(model, yarn_dir(name), dir / "x.gguf", GgmlType::F32); });
}

// tiny_glm4_yarn uses betas 16 / 2 untruncated, which llama.cpp cannot express: refused. With
// llama.cpp's betas the keys are written under glm4.
TEST(YarnGguf, Glm4KeysOrRefusal) {
  auto model = load_model(yarn_dir("tiny_glm4_yarn"));
  TempDir dir;
  const std::string refused = export_refusal(*model, "tiny_glm4_yarn", dir);
  EXPECT_NE(refused.find("gguf export: rope_scaling (YaRN) has beta_fast 16"), std::string::npos)
      << refused;
  model->config.rope_scaling->beta_fast.reset();
  model->config.rope_scaling->beta_slow = 1.0;
  EXPECT_NE(export_refusal(*model, "tiny_glm4_yarn", dir).find("has truncate false"),
            std::string::npos);
  model->config.rope_scaling->truncate.reset();
  auto f = exported(*model, "tiny_glm4_yarn", dir);
  EXPECT_EQ(f->get_string("glm4.rope.scaling.type"), "yarn");
  EXPECT_EQ(f->get_f32("glm4.rope.scaling.factor"), 4.0f);
  EXPECT_EQ(f->get_u32("glm4.rope.scaling.original_context_length"), 64u);
  EXPECT_EQ(f->find("glm4.rope.scaling.yarn_log_multiplier"), nullptr);
  // an attention factor llama.cpp would not compute
  model->config.rope_scaling->attention_factor = 1.5;
  EXPECT_NE(export_refusal(*model, "tiny_glm4_yarn", dir).find("scales cos/sin by 1.5"),
            std::string::npos);
}

// tiny_moe_yarn has llama.cpp's betas, a truncated range and cos/sin times mscale(4): the keys
// under glm4moe, whose YaRN llama.cpp runs over the rope.dimension_count rotated dims, and no
// yarn_log_multiplier (deepseek2 only). An attention factor of its own is refused.
TEST(YarnGguf, Glm4MoeKeysOrRefusal) {
  auto model = load_model(yarn_dir("tiny_moe_yarn"));
  TempDir dir;
  auto f = exported(*model, "tiny_moe_yarn", dir);
  EXPECT_EQ(f->get_string("general.architecture"), "glm4moe");
  EXPECT_EQ(f->get_string("glm4moe.rope.scaling.type"), "yarn");
  EXPECT_EQ(f->get_f32("glm4moe.rope.scaling.factor"), 4.0f);
  EXPECT_EQ(f->get_u32("glm4moe.rope.scaling.original_context_length"), 64u);
  EXPECT_EQ(f->get_u32("glm4moe.rope.dimension_count"), 8u);
  EXPECT_EQ(f->find("glm4moe.rope.scaling.yarn_log_multiplier"), nullptr);
  model->config.rope_scaling->mscale_all_dim = 1.0;  // cos/sin by mscale(4) / mscale(4, 1) = 1
  model->config.rope_scaling->mscale = 1.0;
  EXPECT_NE(export_refusal(*model, "tiny_moe_yarn", dir)
                .find("scales cos/sin by 1 where llama.cpp takes 1.13"),
            std::string::npos);
}

// glm4_moe_lite as deepseek2: the yarn_log_multiplier is 0.1 * mscale_all_dim, as llama.cpp's
// converter writes it; without mscale_all_dim llama.cpp would also scale the softmax: refused.
TEST(YarnGguf, LiteKeysWithLogMultiplierOrRefusal) {
  auto model = load_model(yarn_dir("tiny_lite_yarn"));
  TempDir dir;
  auto f = exported(*model, "tiny_lite_yarn", dir);
  EXPECT_EQ(f->get_string("deepseek2.rope.scaling.type"), "yarn");
  EXPECT_EQ(f->get_f32("deepseek2.rope.scaling.factor"), 4.0f);
  EXPECT_EQ(f->get_u32("deepseek2.rope.scaling.original_context_length"), 64u);
  EXPECT_EQ(f->get_f32("deepseek2.rope.scaling.yarn_log_multiplier"), 0.1f);
  model->config.rope_scaling->mscale_all_dim.reset();
  model->config.rope_scaling->mscale.reset();
  EXPECT_NE(export_refusal(*model, "tiny_lite_yarn", dir).find("where llama.cpp's deepseek2 takes"),
            std::string::npos);
}

}  // namespace
}  // namespace glm4
