// glm4 train --fine-tune-type dora on the embedded model, end to end: the PEFT files it writes,
// generation with the adapter live and fused, conversion to MLX, and the commands that refuse
// DoRA (llama.cpp's LoRA format, bad flag values). And glm4 train on a ChatGLM checkpoint with
// ChatGLM's target names, writing PEFT's ChatGLM keys.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "tests/support/repo_paths.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using glm4::testing::kFinetune;
using glm4::testing::kModel;
using glm4::testing::kSource;
using glm4::testing::run;
using glm4::testing::run_program;
using glm4::testing::succeeds;
using glm4::testing::TempDir;
using json = nlohmann::json;

json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

TEST(DoraCli, TrainFuseGenerateAndConvert) {
  TempDir tmp;
  const std::string adapter = (tmp / "adapter").string(), fused = (tmp / "fused").string();
  ASSERT_TRUE(succeeds(run({"train",
                            "--config",
                            kSource + "/configs/main_job.json",
                            "--model",
                            kModel,
                            "--data",
                            kFinetune,
                            "--out",
                            adapter,
                            "--iters",
                            "4",
                            "--warmup",
                            "0",
                            "--steps-per-eval",
                            "4",
                            "--val-batches",
                            "1",
                            "--learning-rate",
                            "5e-3",
                            "--fine-tune-type",
                            "dora"})));
  json cfg = read_json(tmp / "adapter/adapter_config.json");
  EXPECT_EQ(cfg["use_dora"], true);
  auto weights = SafetensorsFile::open(tmp / "adapter/adapter_model.safetensors");
  EXPECT_EQ(weights->at("base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector")
                .shape.size(),
            1u);

  ASSERT_TRUE(succeeds(
      run({"fuse", "--model", kModel, "--adapter", adapter, "--out", fused, "--dtype", "f32"})));
  const std::string q = "What is 17 plus 25?";
  auto live = run_program(GLM4_BINARY,
                          {"generate", "--model", kModel, "--adapter", adapter, "--chat",
                           "--prompt", q, "--max-tokens", "24", "--json", "--compute", "f32"},
                          true);
  auto merged = run_program(GLM4_BINARY,
                            {"generate", "--model", fused, "--chat", "--prompt", q, "--max-tokens",
                             "24", "--json", "--compute", "f32"},
                            true);
  ASSERT_TRUE(succeeds(live));
  ASSERT_TRUE(succeeds(merged));
  EXPECT_EQ(json::parse(live.output)["ids"], json::parse(merged.output)["ids"]);

  ASSERT_TRUE(succeeds(run(
      {"adapter", "convert", "--in", adapter, "--out", (tmp / "mlx").string(), "--to", "mlx"})));
  EXPECT_EQ(read_json(tmp / "mlx/adapter_config.json")["fine_tune_type"], "dora");

  auto gguf = run({"export", "gguf-lora", "--model", kModel, "--adapter", adapter, "--out",
                   (tmp / "a.gguf").string()});
  EXPECT_FALSE(succeeds(gguf));
  EXPECT_NE(gguf.output.find("DoRA"), std::string::npos) << gguf.output;

  auto bad = run({"train", "--model", kModel, "--data", kFinetune, "--out", (tmp / "x").string(),
                  "--fine-tune-type", "vera"});
  EXPECT_FALSE(succeeds(bad));
  EXPECT_NE(bad.output.find("--fine-tune-type must be lora, dora or full"), std::string::npos)
      << bad.output;
}

// tiny_chatglm has no tokenizer: pre-tokenized records.
TEST(ChatGlmCli, TrainsQueryKeyValueAndWritesPeftsChatGlmKeys) {
  TempDir tmp;
  {
    std::ofstream data(tmp / "train.jsonl");
    for (int r = 0; r < 8; ++r) {
      json ids = json::array();
      for (int t = 0; t < 24; ++t) ids.push_back(1 + (r * 7 + t * 5) % 500);
      data << json{{"input_ids", ids}}.dump() << "\n";
    }
  }
  const std::string model = std::string(GLM4_TEST_DATA) + "/tiny_chatglm",
                    data = (tmp / "train.jsonl").string();
  auto train = [&](const std::string& out, std::vector<std::string> extra) {
    std::vector<std::string> args{"train",
                                  "--model",
                                  model,
                                  "--data",
                                  data,
                                  "--out",
                                  (tmp / out).string(),
                                  "--iters",
                                  "3",
                                  "--batch-size",
                                  "2",
                                  "--learning-rate",
                                  "1e-2",
                                  "--lora-rank",
                                  "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args);
  };
  ASSERT_TRUE(succeeds(
      train("fused", {"--lora-targets", "query_key_value,dense,dense_h_to_4h,dense_4h_to_h"})));
  json cfg = read_json(tmp / "fused/adapter_config.json");
  EXPECT_EQ(cfg["target_modules"],
            json({"query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"}));
  auto file = SafetensorsFile::open(tmp / "fused/adapter_model.safetensors");
  EXPECT_EQ(file->at("base_model.model.transformer.encoder.layers.1.self_attention.query_key_value."
                     "lora_B.weight")
                .shape,
            (std::vector<int64_t>{128, 2}));
  EXPECT_EQ(file->tensors().size(), 16u);

  auto refused = train("separate", {"--lora-targets", "q_proj,v_proj"});
  EXPECT_FALSE(succeeds(refused));
  EXPECT_NE(refused.output.find("--adapter-format mlx"), std::string::npos) << refused.output;
  EXPECT_FALSE(std::filesystem::exists(tmp / "separate/adapter_model.safetensors"));
  ASSERT_TRUE(
      succeeds(train("separate", {"--lora-targets", "q_proj,v_proj", "--adapter-format", "mlx"})));
  EXPECT_TRUE(std::filesystem::exists(tmp / "separate/adapters.safetensors"));
}

}  // namespace
}  // namespace glm4
