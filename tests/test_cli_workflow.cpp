// A user's session on the embedded model (models/glm4-tiny, sentencepiece tokenizer): tokenize,
// logits from text, a short LoRA run on the fine-tuning set, generation with the adapter live and
// fused, perplexity, and the README's library example giving what `glm4 generate` gives.
#include <gtest/gtest.h>

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
namespace fs = std::filesystem;

TEST(Workflow, TokenizeAndLogitsFromText) {
  TempDir tmp;
  auto plain =
      run_program(GLM4_BINARY, {"tokenize", "--model", kModel, "--text", "In the beginning"}, true);
  ASSERT_TRUE(succeeds(plain));
  auto chat = run_program(
      GLM4_BINARY, {"tokenize", "--model", kModel, "--text", "In the beginning", "--chat"}, true);
  ASSERT_TRUE(succeeds(chat));
  EXPECT_NE(chat.output.find("5,7,10"), std::string::npos)
      << chat.output;  // [gMASK] <sop> <|user|>
  EXPECT_NE(chat.output.find(plain.output.substr(0, plain.output.find_last_not_of("\n") + 1)),
            std::string::npos);

  const std::string out = (tmp / "l.safetensors").string();
  ASSERT_TRUE(
      succeeds(run({"logits", "--model", kModel, "--text", "In the beginning", "--out", out})));
  auto f = SafetensorsFile::open(out);
  EXPECT_EQ(f->at("logits").shape[1], 4000);
  EXPECT_EQ(f->at("input_ids").shape[0], f->at("logits").shape[0]);
}

TEST(Workflow, ShortLoraRunThenLiveFusedAndExampleAgree) {
  TempDir tmp;
  const std::string adapter = (tmp / "adapter").string(), fused = (tmp / "fused").string();
  ASSERT_TRUE(
      succeeds(run({"train", "--config", kSource + "/configs/main_job.json", "--model", kModel,
                    "--data", kFinetune, "--out", adapter, "--iters", "4", "--warmup", "0",
                    "--steps-per-eval", "4", "--val-batches", "1", "--learning-rate", "5e-3"})));
  ASSERT_TRUE(succeeds(
      run({"fuse", "--model", kModel, "--adapter", adapter, "--out", fused, "--dtype", "f32"})));
  for (const char* f :
       {"config.json", "generation_config.json", "tokenizer.model", "tokenizer_config.json"})
    EXPECT_TRUE(fs::exists(tmp / "fused" / f)) << f;

  const std::string q = "What is 17 plus 25?";
  auto base = run_program(
      GLM4_BINARY, {"generate", "--model", kModel, "--chat", "--prompt", q, "--max-tokens", "24"},
      true);
  // Exact agreement of live and merged needs the same products: the fused model is f32, so f32.
  auto live = run_program(GLM4_BINARY,
                          {"generate", "--model", kModel, "--adapter", adapter, "--chat",
                           "--prompt", q, "--max-tokens", "24", "--json", "--compute", "f32"},
                          true);
  auto merged = run_program(GLM4_BINARY,
                            {"generate", "--model", fused, "--chat", "--prompt", q, "--max-tokens",
                             "24", "--json", "--compute", "f32"},
                            true);
  ASSERT_TRUE(succeeds(base));
  ASSERT_TRUE(succeeds(live));
  ASSERT_TRUE(succeeds(merged));
  auto jl = nlohmann::json::parse(live.output), jm = nlohmann::json::parse(merged.output);
  EXPECT_EQ(jl["ids"], jm["ids"]);
  EXPECT_EQ(jl["text"], jm["text"]);

  // The library example streams exactly what the command line prints, with and without adapter.
  auto example = run_program(GLM4_EXAMPLE, {kModel, q}, true);
  ASSERT_TRUE(succeeds(example));
  auto cli = run_program(
      GLM4_BINARY, {"generate", "--model", kModel, "--chat", "--prompt", q, "--max-tokens", "64"},
      true);
  EXPECT_EQ(example.output, cli.output);
  auto example_adapted = run_program(GLM4_EXAMPLE, {kModel, q, adapter}, true);
  ASSERT_TRUE(succeeds(example_adapted));
  auto cli_adapted = run_program(GLM4_BINARY,
                                 {"generate", "--model", kModel, "--adapter", adapter, "--chat",
                                  "--prompt", q, "--max-tokens", "64"},
                                 true);
  EXPECT_EQ(example_adapted.output, cli_adapted.output);

  auto p_live = run_program(GLM4_BINARY,
                            {"perplexity", "--model", kModel, "--adapter", adapter, "--data",
                             kFinetune + "/valid.jsonl", "--compute", "f32"},
                            true);
  auto p_fused = run_program(
      GLM4_BINARY,
      {"perplexity", "--model", fused, "--data", kFinetune + "/valid.jsonl", "--compute", "f32"},
      true);
  ASSERT_TRUE(succeeds(p_live));
  ASSERT_TRUE(succeeds(p_fused));
  double a = nlohmann::json::parse(p_live.output)["loss"],
         b = nlohmann::json::parse(p_fused.output)["loss"];
  EXPECT_NEAR(a, b, 1e-4 * a);

  // The adapter changed the model: held-out loss fell, and the generated answer differs.
  auto p_base = run_program(
      GLM4_BINARY,
      {"perplexity", "--model", kModel, "--data", kFinetune + "/valid.jsonl", "--compute", "f32"},
      true);
  ASSERT_TRUE(succeeds(p_base));
  double base_loss = nlohmann::json::parse(p_base.output)["loss"];
  EXPECT_LT(a, base_loss - 0.05) << "adapter " << a << " vs base " << base_loss;
  auto base_json = run_program(GLM4_BINARY,
                               {"generate", "--model", kModel, "--chat", "--prompt", q,
                                "--max-tokens", "24", "--json", "--compute", "f32"},
                               true);
  ASSERT_TRUE(succeeds(base_json));
  EXPECT_NE(nlohmann::json::parse(base_json.output)["ids"], jl["ids"]);
}

TEST(Workflow, EvaluateScoresPerTaskAndNamesABadLineOnce) {
  auto r = run_program(
      GLM4_BINARY,
      {"evaluate", "--model", kModel, "--data", kFinetune + "/valid.jsonl", "--max-examples", "8"},
      true);
  ASSERT_TRUE(succeeds(r));
  nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["examples"], 8);
  EXPECT_GE(double(j["exact_match"]), 0.0);
  EXPECT_LE(double(j["exact_match"]), 1.0);
  EXPECT_GT(double(j["answer_loss"]), 0.0);
  ASSERT_TRUE(j.contains("exact_match_by_task"));
  EXPECT_FALSE(j["exact_match_by_task"].empty());

  const std::string text_data = kSource + "/data/corpus/pretrain.jsonl";
  auto bad = run_program(GLM4_BINARY, {"evaluate", "--model", kModel, "--data", text_data});
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.output.find("pretrain.jsonl:1: evaluate needs records with an answer"),
            std::string::npos)
      << bad.output;
}

TEST(Workflow, ExampleRejectsAMissingModel) {
  auto r = run_program(GLM4_EXAMPLE, {"/nonexistent/model", "hi"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("/nonexistent/model"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace glm4
