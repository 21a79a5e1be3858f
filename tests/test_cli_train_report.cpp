// What `glm4 train` tells while it runs: the start-of-run summary (printed, and fields of the first
// metrics line) and report lines that show the mean loss since the last report, as mlx-lm does.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "tests/support/repo_paths.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using glm4::testing::kFinetune;
using glm4::testing::kModel;
using glm4::testing::Result;
using glm4::testing::run;
using glm4::testing::succeeds;
using glm4::testing::TempDir;
namespace fs = std::filesystem;
using nlohmann::json;

std::vector<json> metrics(const fs::path& file) {
  std::vector<json> out;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) out.push_back(json::parse(line));
  return out;
}

TEST(TrainReport, SummaryFirstThenTheMeanLossOfEachReport) {
  TempDir tmp;
  Result r = run({"train",
                  "--model",
                  kModel,
                  "--data",
                  kFinetune,
                  "--out",
                  (tmp / "run").string(),
                  "--iters",
                  "6",
                  "--steps-per-report",
                  "3",
                  "--steps-per-eval",
                  "100",
                  "--val-batches",
                  "1",
                  "--batch-size",
                  "2",
                  "--mask-prompt",
                  "--learning-rate",
                  "1e-3",
                  "--lora-rank",
                  "8",
                  "--lora-alpha",
                  "16",
                  "--lora-targets",
                  "q_proj,k_proj,v_proj,o_proj"});
  ASSERT_TRUE(succeeds(r));
  const std::vector<json> lines = metrics(tmp / "run" / "metrics.jsonl");
  ASSERT_FALSE(lines.empty());
  const json& first = lines[0];
  for (const char* key : {"trainable_params", "total_params", "trainable_share", "train_examples",
                          "valid_examples", "train_tokens", "target_tokens", "masked_share",
                          "steps_per_epoch", "epochs", "compute", "weights_memory"})
    EXPECT_TRUE(first.contains(key)) << key << " missing in " << first.dump();
  // The embedded model's q/k/v/o with r 8: 4 layers x 8 x ((256 + 256) + (256 + 128) x 2 +
  // (256 + 256)) (k and v project to 2 heads of 64).
  EXPECT_EQ(first["trainable_params"], 4 * 8 * (512 + 384 * 2 + 512));
  EXPECT_EQ(first["train_examples"], 4786);
  EXPECT_EQ(first["steps_per_epoch"], 4786 / 2);
  EXPECT_GT(first["masked_share"].get<double>(), 0.3);  // --mask-prompt: the prompts carry none
  EXPECT_LT(first["masked_share"].get<double>(), 1.0);
  EXPECT_NE(r.output.find("trainable: 57.3K of"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("LoRA r 8 alpha 16 on q_proj,k_proj,v_proj,o_proj"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("4786 training examples (448 validation)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("2393 steps per epoch"), std::string::npos) << r.output;

  // Steps 1-3 and 4-6: each report shows (and logs as train_loss) the mean of its steps' losses.
  std::vector<double> loss;
  std::vector<json> reports;
  for (const json& j : lines) {
    if (j.contains("loss")) loss.push_back(j["loss"]);
    if (j.contains("train_loss")) reports.push_back(j);
  }
  ASSERT_EQ(loss.size(), 6u);
  ASSERT_EQ(reports.size(), 2u);
  for (int k = 0; k < 2; ++k) {
    const double mean = (loss[3 * k] + loss[3 * k + 1] + loss[3 * k + 2]) / 3;
    // The step losses are floats, logged in their shortest form: equal to float precision.
    EXPECT_NEAR(reports[size_t(k)]["train_loss"].get<double>(), mean, 1e-6);
    EXPECT_EQ(reports[size_t(k)]["step"], 3 * k + 3);
    char shown[64];
    std::snprintf(shown, sizeof shown, "step %d/6 loss %.4f ", 3 * k + 3, mean);
    EXPECT_NE(r.output.find(shown), std::string::npos) << shown << "\n" << r.output;
  }
}

// The defaults (learning rate 2e-4, r 16, alpha 32, every linear layer: docs/training.md,
// "Defaults") learn visibly in 30 steps on the embedded model: the validation loss falls by more
// than half a nat. The old ones (1e-5, r 8, alpha 16, attention only) moved it by 0.02.
TEST(TrainReport, DefaultsLearnVisiblyInThirtySteps) {
  TempDir tmp;
  Result r = run({"train", "--model", kModel, "--data", kFinetune, "--out", (tmp / "run").string(),
                  "--iters", "30", "--steps-per-eval", "30", "--val-batches", "10"});
  ASSERT_TRUE(succeeds(r));
  std::vector<double> val;
  for (const json& line : metrics(tmp / "run" / "metrics.jsonl"))
    if (line.contains("val_loss")) val.push_back(line["val_loss"].get<double>());
  ASSERT_EQ(val.size(), 2u) << r.output;  // steps 0 and 30
  EXPECT_LT(val[1], val[0] - 0.5) << r.output;
  EXPECT_NE(r.output.find("LoRA r 16 alpha 32 on all-linear"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace glm4
