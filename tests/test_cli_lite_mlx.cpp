// glm4 on mlx-lm's 4-bit glm4_moe_lite conversion, end to end: generate (the tokens of the
// transformers layout with the same weights), QLoRA training (PEFT's layout; mlx-lm's refuses
// kv_b_proj), generate with the adapter, fuse, and export gguf as llama.cpp's deepseek2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "tests/support/gguf_reader.h"
#include "tests/support/lite_mlx_convert.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::run;
using testing::run_program;
using testing::succeeds;

json generate_json(const std::string& model, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args{"generate", "--model",      model, "--tokens",
                                "5,17,200", "--max-tokens", "6",   "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  const testing::Result r = run_program(GLM4_BINARY, args, true);
  EXPECT_TRUE(succeeds(r)) << run(args).output;  // stderr too
  return json::parse(r.output);
}

TEST(CliLiteMlx, GenerateTrainFuseAndExportOnA4BitConversion) {
  testing::TempDir tmp;
  const fs::path lite = fs::path(GLM4_TEST_DATA) / "moe_lite" / "tiny_lite";
  testing::write_wide_lite(lite, tmp / "wide", DType::BF16);
  testing::write_lite_mlx(tmp / "wide", tmp / "mlx", QuantFormat{4, 32}, tmp / "oracle");
  const std::string model = (tmp / "mlx").string();

  const json got = generate_json(model), want = generate_json((tmp / "oracle").string());
  EXPECT_EQ(got["ids"].size(), 6u);
  EXPECT_EQ(got["ids"], want["ids"]);
  EXPECT_EQ(got["rebuilt_bytes"], 3 * 4 * 64 * 64 * 2);

  {
    std::ofstream data(tmp / "train.jsonl");
    for (int r = 0; r < 4; ++r) {
      json ids = json::array();
      for (int t = 0; t < 12; ++t) ids.push_back(1 + (r * 7 + t * 5) % 250);
      data << json{{"input_ids", ids}}.dump() << "\n";
    }
  }
  const std::string adapter = (tmp / "adapter").string();
  ASSERT_TRUE(succeeds(
      run({"train", "--model", model, "--data", (tmp / "train.jsonl").string(), "--out", adapter,
           "--iters", "3", "--batch-size", "2", "--learning-rate", "1e-2", "--lora-rank", "2",
           "--lora-targets", "q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj,o_proj,experts"})));
  auto file = SafetensorsFile::open(tmp / "adapter" / "adapter_model.safetensors");
  for (const char* module : {"self_attn.kv_b_proj", "self_attn.q_a_proj", "mlp.experts.3.up_proj"})
    EXPECT_NE(
        file->find(std::string("base_model.model.model.layers.1.") + module + ".lora_A.weight"),
        nullptr)
        << module;
  EXPECT_NE(generate_json(model, {"--adapter", adapter})["ids"], json());
  // mlx-lm's own adapter layout has no kv_b_proj (its embed_q / unembed_out take no LoRA).
  const testing::Result mlx_layout =
      run({"train", "--model", model, "--data", (tmp / "train.jsonl").string(), "--out",
           (tmp / "mlx_adapter").string(), "--iters", "1", "--lora-targets", "kv_b_proj,o_proj",
           "--adapter-format", "mlx"});
  EXPECT_FALSE(succeeds(mlx_layout));
  EXPECT_NE(mlx_layout.output.find("LoRA target kv_b_proj"), std::string::npos)
      << mlx_layout.output;
  EXPECT_FALSE(fs::exists(tmp / "mlx_adapter" / "adapters.safetensors"));

  const std::string fused = (tmp / "fused").string();
  ASSERT_TRUE(succeeds(run({"fuse", "--model", model, "--adapter", adapter, "--out", fused})));
  EXPECT_NE(generate_json(fused)["ids"], json());

  const std::string gguf = (tmp / "lite.gguf").string();
  ASSERT_TRUE(succeeds(run({"export", "gguf", "--model", model, "--out", gguf})));
  auto f = GgufFile::open(gguf);
  EXPECT_EQ(f->get_string("general.architecture"), "deepseek2");
  EXPECT_NE(f->find_tensor("blk.1.attn_k_b.weight"), nullptr);
  EXPECT_NE(f->find_tensor("blk.1.attn_v_b.weight"), nullptr);
}

}  // namespace
}  // namespace glm4
