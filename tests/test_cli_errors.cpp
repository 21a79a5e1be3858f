// Errors a user can cause, as the glm4 binary prints them: one line "glm4: error: <what>: <why>"
// naming the flag, file or field, never a library's own text (CLI11's "Could not convert", "At
// Most 1 required", nlohmann's parse errors, std::filesystem's, the sampler's "[sampler]").
#include <gtest/gtest.h>

#include <fstream>

#include "tests/support/repo_paths.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using glm4::testing::kModel;
using glm4::testing::Result;
using glm4::testing::run;
using glm4::testing::TempDir;

// The first line of the output (stderr and stdout), which is the error's.
std::string first_line(const Result& r) { return r.output.substr(0, r.output.find('\n')); }

TEST(CliErrors, FlagValuesThatAreNotNumbersNameTheFlagAndTheValue) {
  Result lr = run({"train", "--model", "m", "--data", "d", "--out", "o", "--learning-rate", "abc"});
  EXPECT_EQ(lr.status, 1);
  EXPECT_EQ(first_line(lr), "glm4: error: --learning-rate: expected a number, got 'abc'");
  EXPECT_NE(lr.output.find("Run glm4 train --help for the flags."), std::string::npos) << lr.output;
  Result iters = run({"train", "--model", "m", "--data", "d", "--out", "o", "--iters", "1.5"});
  EXPECT_EQ(first_line(iters), "glm4: error: --iters: expected an integer, got '1.5'");
}

// As argparse (mlx-lm) does: a flag given twice takes its last value.
TEST(CliErrors, AFlagGivenTwiceTakesTheLastValue) {
  Result twice = run({"tokenize", "--model", kModel, "--text", "first", "--text", "Hello"});
  Result once = run({"tokenize", "--model", kModel, "--text", "Hello"});
  ASSERT_EQ(twice.status, 0) << twice.output;
  EXPECT_EQ(twice.output, once.output);
}

TEST(CliErrors, YamlConfigsAreRefusedAsNotJson) {
  TempDir tmp;
  std::ofstream(tmp / "lora.yaml") << "model: m\niters: 5\n";
  std::ofstream(tmp / "lora.json") << "# mlx-lm style\nmodel: m\nlora_parameters:\n  rank: 8\n";
  for (const char* name : {"lora.yaml", "lora.json"}) {
    const std::string path = (tmp / name).string();
    Result r = run({"train", "--config", path});
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(first_line(r),
              "glm4: error: --config: " + path +
                  ": expected JSON, got YAML: glm4 reads JSON configs; write the "
                  "same keys as {\"key\": value, ...} (mlx-lm's keys are understood)");
  }
}

TEST(CliErrors, MlxLmConfigKeysWorkOrNameGlm4sFlag) {
  TempDir tmp;
  // mlx-lm's layout: understood (the run then fails in the settings' own check, named).
  std::ofstream(tmp / "mlx.json")
      << R"({"model": "m", "data": "d", "adapter_path": "o", "iters": 5, "warmup": 6,
             "lora_parameters": {"rank": 8, "scale": 20.0, "dropout": 0.0,
                                 "keys": ["self_attn.q_proj", "self_attn.v_proj"]}})";
  Result mlx = run({"train", "--config", (tmp / "mlx.json").string()});
  EXPECT_EQ(first_line(mlx), "glm4: error: --warmup must be in [0, iters], got 6");
  std::ofstream(tmp / "lr.json") << R"({"model": "m", "lr": 0.0002})";
  const std::string lr = (tmp / "lr.json").string();
  Result r = run({"train", "--config", lr});
  EXPECT_EQ(first_line(r), "glm4: error: " + lr +
                               ": unknown key \"lr\": glm4 spells it 'learning_rate' "
                               "(--learning-rate)");
}

TEST(CliErrors, SamplingFlagsOutOfRangeAreNamedAsFlags) {
  Result temp = run({"generate", "--model", kModel, "--prompt", "hi", "--temp", "-1"});
  EXPECT_EQ(temp.status, 1);
  EXPECT_EQ(first_line(temp), "glm4: error: --temp: must be >= 0, got -1");
  Result top_p = run({"generate", "--model", kModel, "--prompt", "hi", "--top-p", "0"});
  EXPECT_EQ(first_line(top_p), "glm4: error: --top-p: must be in (0, 1], got 0");
}

TEST(CliErrors, ADirectoryWhereADataFileIsExpectedIsNamed) {
  TempDir tmp;
  const std::string dir = (tmp / "empty").string();
  std::filesystem::create_directories(dir);
  Result r = run({"perplexity", "--model", kModel, "--data", dir});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(first_line(r).rfind("glm4: error: --data: " + dir + ": is a directory", 0), 0u)
      << r.output;
  Result prompts = run({"generate", "--model", kModel, "--prompts-file", dir});
  EXPECT_EQ(first_line(prompts),
            "glm4: error: --prompts-file " + dir + ": is a directory, expected a file");
}

TEST(CliErrors, OutUnderARegularFileSaysWhichPathIsAFile) {
  TempDir tmp;
  const std::string file = (tmp / "notes.txt").string();
  std::ofstream(file) << "x";
  const std::string out = file + "/run";
  Result train = run({"train", "--model", "m", "--data", "d", "--out", out});
  EXPECT_EQ(train.status, 1);
  EXPECT_EQ(first_line(train), "glm4: error: --out " + out + ": cannot create directories: " +
                                   file + " is a file, not a directory");
  Result init = run(
      {"init", "--config", glm4::testing::kSource + "/configs/tiny.json", "--out", file + "/a/b"});
  EXPECT_EQ(first_line(init), "glm4: error: --out " + file + "/a/b: cannot create directories: " +
                                  file + " is a file, not a directory");
}

}  // namespace
}  // namespace glm4
