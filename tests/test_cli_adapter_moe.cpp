// glm4 adapter convert on a glm4_moe adapter, end to end: PEFT to mlx-lm's stacked switch_mlp
// layout (as deep as --model's expert count) and back, the same tensors bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "io/safetensors.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using glm4::testing::run;
using glm4::testing::succeeds;
using glm4::testing::TempDir;

TEST(CliAdapterMoe, ConvertToMlxAndBackIsBitForBit) {
  TempDir tmp;
  const std::string model = std::string(GLM4_TEST_DATA) + "/moe/tiny_moe";
  const std::string peft = std::string(GLM4_TEST_DATA) + "/moe/lora_train_moe";
  const std::string mlx = (tmp / "mlx").string(), back = (tmp / "back").string();
  ASSERT_TRUE(succeeds(
      run({"adapter", "convert", "--in", peft, "--out", mlx, "--to", "mlx", "--model", model})));
  auto stacked = SafetensorsFile::open(tmp / "mlx" / "adapters.safetensors");
  EXPECT_EQ(stacked->at("model.layers.2.mlp.switch_mlp.down_proj.lora_b").shape,
            (std::vector<int64_t>{16, 32, 4}));
  EXPECT_EQ(stacked->find("model.layers.2.mlp.experts.0.down_proj.lora_a"), nullptr);
  ASSERT_TRUE(succeeds(run({"adapter", "convert", "--in", mlx, "--out", back, "--to", "peft"})));
  auto a = SafetensorsFile::open(peft + "/adapter_model.safetensors");
  auto b = SafetensorsFile::open(tmp / "back" / "adapter_model.safetensors");
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (const TensorInfo& t : a->tensors()) {
    const TensorInfo* u = b->find(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(t.shape, u->shape) << t.name;
    const std::vector<float> x = read_f32(t), y = read_f32(*u);
    EXPECT_TRUE(x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * 4) == 0)
        << t.name;
  }
}

}  // namespace
}  // namespace glm4
