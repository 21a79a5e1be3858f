// The quantized workflow from the command line on the embedded model: glm4 quantize, generate,
// a QLoRA run with checkpointing, fuse with the measured re-quantization report and --data,
// fuse --dequantize, and init --bits giving the bytes of init + quantize.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

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
namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

nlohmann::json last_json_line(const std::string& out) {
  const size_t end = out.find_last_not_of('\n');
  const size_t begin = out.rfind('\n', end);
  return nlohmann::json::parse(out.substr(begin == std::string::npos ? 0 : begin + 1, end + 1));
}

TEST(QuantizeCli, QuantizeTrainQloraFuseAndDequantize) {
  TempDir tmp;
  const std::string q = (tmp / "q4").string(), adapter = (tmp / "adapter").string();
  auto r = run({"quantize", "--model", kModel, "--out", q, "--bits", "4", "--keep", "lm_head:8"});
  ASSERT_TRUE(succeeds(r));
  EXPECT_NE(r.output.find("8-bit/g64"), std::string::npos) << r.output;
  auto config = nlohmann::json::parse(slurp(tmp / "q4" / "config.json"));
  EXPECT_EQ(config["quantization"]["lm_head"]["bits"], 8);
  EXPECT_EQ(config["quantization_config"], config["quantization"]);
  EXPECT_TRUE(fs::exists(tmp / "q4" / "tokenizer.model"));
  ASSERT_TRUE(succeeds(run(
      {"generate", "--model", q, "--chat", "--prompt", "What is 2 plus 2?", "--max-tokens", "8"})));

  ASSERT_TRUE(succeeds(run({"train",
                            "--config",
                            kSource + "/configs/main_job.json",
                            "--model",
                            q,
                            "--data",
                            kFinetune,
                            "--out",
                            adapter,
                            "--iters",
                            "3",
                            "--warmup",
                            "0",
                            "--steps-per-eval",
                            "3",
                            "--val-batches",
                            "1",
                            "--learning-rate",
                            "5e-3",
                            "--grad-checkpoint",
                            "--batch-size",
                            "4"})));
  EXPECT_TRUE(fs::exists(tmp / "adapter" / "adapter_model.safetensors"));

  auto fused = run({"fuse", "--model", q, "--adapter", adapter, "--out", (tmp / "fused").string(),
                    "--data", kFinetune + "/valid.jsonl", "--batch-size", "8"});
  ASSERT_TRUE(succeeds(fused));
  EXPECT_NE(fused.output.find("onto the quantized base"), std::string::npos) << fused.output;
  const nlohmann::json losses = last_json_line(fused.output);
  for (const char* k : {"base_loss", "adapter_loss", "fused_loss", "gain_kept"})
    EXPECT_TRUE(losses.contains(k)) << k;
  EXPECT_TRUE(nlohmann::json::parse(slurp(tmp / "fused" / "config.json")).contains("quantization"));

  // --dequantize: the exact merge, dense, scores what the live adapter scores.
  const std::string dense = (tmp / "dense").string();
  ASSERT_TRUE(succeeds(run({"fuse", "--model", q, "--adapter", adapter, "--out", dense,
                            "--dequantize", "--dtype", "f32"})));
  EXPECT_FALSE(
      nlohmann::json::parse(slurp(tmp / "dense" / "config.json")).contains("quantization"));
  auto live = run_program(GLM4_BINARY,
                          {"perplexity", "--model", q, "--adapter", adapter, "--data",
                           kFinetune + "/valid.jsonl", "--compute", "f32"},
                          true);
  auto merged = run_program(
      GLM4_BINARY,
      {"perplexity", "--model", dense, "--data", kFinetune + "/valid.jsonl", "--compute", "f32"},
      true);
  ASSERT_TRUE(succeeds(live));
  ASSERT_TRUE(succeeds(merged));
  EXPECT_NEAR(last_json_line(live.output)["loss"].get<double>(),
              last_json_line(merged.output)["loss"].get<double>(), 1e-4);
}

// QLoRA checkpoints resume exactly: 3 steps + resume to 6 writes the adapter of 6 straight steps.
TEST(QuantizeCli, QloraResumesBitIdentically) {
  TempDir tmp;
  const std::string q = (tmp / "q4").string();
  ASSERT_TRUE(succeeds(run({"quantize", "--model", kModel, "--out", q, "--bits", "4"})));
  const std::vector<std::string> common{"train",
                                        "--config",
                                        kSource + "/configs/main_job.json",
                                        "--model",
                                        q,
                                        "--data",
                                        kFinetune,
                                        "--warmup",
                                        "0",
                                        "--steps-per-eval",
                                        "6",
                                        "--val-batches",
                                        "1",
                                        "--batch-size",
                                        "4",
                                        "--save-every",
                                        "3",
                                        "--seed",
                                        "1",
                                        "--lr-schedule",
                                        "constant",
                                        "--grad-checkpoint"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args);
  };
  ASSERT_TRUE(succeeds(with({"--out", (tmp / "straight").string(), "--iters", "6"})));
  ASSERT_TRUE(succeeds(with({"--out", (tmp / "resumed").string(), "--iters", "3"})));
  ASSERT_TRUE(succeeds(with({"--out", (tmp / "resumed").string(), "--iters", "6", "--resume",
                             (tmp / "resumed" / "checkpoint.h5").string()})));
  EXPECT_EQ(slurp(tmp / "straight" / "adapter_model.safetensors"),
            slurp(tmp / "resumed" / "adapter_model.safetensors"));
}

TEST(QuantizeCli, InitBitsWritesWhatInitThenQuantizeWrites) {
  TempDir tmp;
  const std::string config = std::string(GLM4_TEST_DATA) + "/tiny_glm4/config.json";
  auto direct = run({"init", "--config", config, "--out", (tmp / "direct").string(), "--dtype",
                     "bf16", "--seed", "3", "--bits", "4", "--keep", "down_proj:4/32"});
  ASSERT_TRUE(succeeds(direct));
  EXPECT_NE(direct.output.find("4-bit affine"), std::string::npos) << direct.output;
  ASSERT_TRUE(succeeds(run({"init", "--config", config, "--out", (tmp / "dense").string(),
                            "--dtype", "bf16", "--seed", "3"})));
  ASSERT_TRUE(succeeds(run({"quantize", "--model", (tmp / "dense").string(), "--out",
                            (tmp / "q").string(), "--keep", "down_proj:4/32"})));
  EXPECT_EQ(slurp(tmp / "direct" / "model.safetensors"), slurp(tmp / "q" / "model.safetensors"));
  EXPECT_EQ(nlohmann::json::parse(slurp(tmp / "direct" / "config.json"))["quantization"],
            nlohmann::json::parse(slurp(tmp / "q" / "config.json"))["quantization"]);
}

// Quantizing a quantized model works (its matrices are dequantized first) and says that it
// rounds them again; a fresh model's run does not say so.
TEST(QuantizeCli, RequantizingSaysItRoundsAgain) {
  TempDir tmp;
  const auto first = run({"quantize", "--model", kModel, "--out", (tmp / "q4").string()});
  ASSERT_TRUE(succeeds(first));
  EXPECT_EQ(first.output.find("already quantized"), std::string::npos) << first.output;
  const auto again =
      run({"quantize", "--model", (tmp / "q4").string(), "--out", (tmp / "q4b").string()});
  ASSERT_TRUE(succeeds(again));
  EXPECT_NE(again.output.find("already quantized"), std::string::npos) << again.output;
}

TEST(QuantizeCli, BadFlagsAreNamed) {
  TempDir tmp;
  auto bits = run({"quantize", "--model", kModel, "--out", (tmp / "a").string(), "--bits", "7"});
  EXPECT_NE(bits.status, 0);
  EXPECT_NE(bits.output.find("bits 7"), std::string::npos) << bits.output;
  auto keep =
      run({"quantize", "--model", kModel, "--out", (tmp / "b").string(), "--keep", "lm_head"});
  EXPECT_NE(keep.status, 0);
  EXPECT_NE(keep.output.find("--keep lm_head"), std::string::npos) << keep.output;
  // A rule's unsupported width is named in the house style; a rule that names no module (a
  // typo) is refused instead of changing nothing; neither writes --out.
  auto width =
      run({"quantize", "--model", kModel, "--out", (tmp / "d").string(), "--keep", "lm_head:7"});
  EXPECT_NE(width.status, 0);
  EXPECT_NE(width.output.find("glm4: error: --keep lm_head:7: bits 7 not supported"),
            std::string::npos)
      << width.output;
  auto typo =
      run({"quantize", "--model", kModel, "--out", (tmp / "e").string(), "--keep", "lm_haed:8"});
  EXPECT_NE(typo.status, 0);
  EXPECT_NE(typo.output.find("--keep lm_haed: matches no module of the model"), std::string::npos)
      << typo.output;
  EXPECT_FALSE(std::filesystem::exists(tmp / "d"));
  EXPECT_FALSE(std::filesystem::exists(tmp / "e"));
  auto init = run({"init", "--config", kModel + "/config.json", "--out", (tmp / "c").string(),
                   "--keep", "lm_head:8"});
  EXPECT_NE(init.status, 0);
  EXPECT_NE(init.output.find("--keep needs --bits"), std::string::npos) << init.output;
}

// init --bits checks its --keep rules against the modules of --config as quantize does against
// --model's: a typo is refused naming it, and nothing is written.
TEST(QuantizeCli, InitBitsRefusesAKeepRuleThatMatchesNoModule) {
  TempDir tmp;
  const std::string config = kModel + "/config.json";
  auto typo = run({"init", "--config", config, "--out", (tmp / "typo").string(), "--bits", "4",
                   "--keep", "lm_haed:8"});
  EXPECT_NE(typo.status, 0);
  EXPECT_NE(typo.output.find("glm4: error: --keep lm_haed: matches no module of the model"),
            std::string::npos)
      << typo.output;
  EXPECT_FALSE(std::filesystem::exists(tmp / "typo"));
  auto right = run({"init", "--config", config, "--out", (tmp / "right").string(), "--bits", "4",
                    "--keep", "lm_head:8", "--keep", "model.layers.0.mlp.down_proj:none"});
  ASSERT_TRUE(succeeds(right));
  EXPECT_TRUE(std::filesystem::exists(tmp / "right" / "model.safetensors"));
}

}  // namespace
}  // namespace glm4
