// Errors a user can cause, as the glm4 binary prints them: one line "glm4: error: <what>: <why>"
// naming the flag, file or field, never a library's own text (CLI11's "Could not convert", "At
// Most 1 required", nlohmann's parse errors, std::filesystem's, the sampler's "[sampler]").
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/support/repo_paths.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using glm4::testing::first_line;
using glm4::testing::kModel;
using glm4::testing::Result;
using glm4::testing::run;
using glm4::testing::TempDir;

TEST(CliErrors, FlagValuesThatAreNotNumbersNameTheFlagAndTheValue) {
  Result lr = run({"train", "--model", "m", "--data", "d", "--out", "o", "--learning-rate", "abc"});
  EXPECT_EQ(lr.status, 1);
  EXPECT_EQ(first_line(lr), "glm4: error: --learning-rate: expected a number, got 'abc'");
  EXPECT_NE(lr.output.find("Run glm4 train --help for the flags."), std::string::npos) << lr.output;
  Result iters = run({"train", "--model", "m", "--data", "d", "--out", "o", "--iters", "1.5"});
  EXPECT_EQ(first_line(iters), "glm4: error: --iters: expected an integer, got '1.5'");
  // Given twice, the last value counts, and it is the one named.
  Result twice = run({"train", "--model", "m", "--data", "d", "--out", "o", "--learning-rate",
                      "1e-4", "--learning-rate", "abc"});
  EXPECT_EQ(first_line(twice), "glm4: error: --learning-rate: expected a number, got 'abc'");
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

// A config value of the wrong type says which type the key takes; 1.5 is not cut to 1.
TEST(CliErrors, ConfigValuesOfTheWrongTypeSayWhatTheKeyTakes) {
  TempDir tmp;
  const std::string file = (tmp / "job.json").string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"iters": 1.5})", R"(key "iters" has the wrong type (1.5; expected an integer))"},
      {R"({"model": 5})", R"(key "model" has the wrong type (5; expected a string))"},
      {R"({"mask_prompt": "yes"})",
       R"(key "mask_prompt" has the wrong type ("yes"; expected true or false))"},
      {R"({"learning_rate": "1e-3"})",
       R"(key "learning_rate" has the wrong type ("1e-3"; expected a number))"},
  };
  for (const auto& [text, why] : cases) {
    std::ofstream(file) << text;
    Result r = run({"train", "--config", file});
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(first_line(r), "glm4: error: " + file + ": " + why);
  }
}

TEST(CliErrors, SamplingFlagsOutOfRangeAreNamedAsFlags) {
  Result temp = run({"generate", "--model", kModel, "--prompt", "hi", "--temp", "-1"});
  EXPECT_EQ(temp.status, 1);
  EXPECT_EQ(first_line(temp), "glm4: error: --temp: must be >= 0, got -1");
  Result temperature =
      run({"generate", "--model", kModel, "--prompt", "hi", "--temperature", "-1"});
  EXPECT_EQ(first_line(temperature), "glm4: error: --temp: must be >= 0, got -1");
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

// A checkpoint that cannot be written (the disk is full; here the file-size limit says so) ends
// the run with the error naming the file and status 1, and leaves no temporary file. libhdf5's
// exit handler used to fault on the file whose close had failed: status 139 after the message.
TEST(CliErrors, ACheckpointThatCannotBeWrittenEndsTheRunWithAnErrorNotACrash) {
  TempDir tmp;
  const std::string data = (tmp / "train.jsonl").string(), out = (tmp / "run").string();
  {
    std::ofstream f(data);
    for (int i = 0; i < 8; ++i) {
      f << "{\"input_ids\": [";
      for (int t = 0; t < 32; ++t) f << (t ? ", " : "") << 3 + (i * 37 + t * 11) % 190;
      f << "]}\n";
    }
  }
  // 300 KiB: the adapter fits, the checkpoint with its AdamW moments does not.
  const std::string train = std::string("'") + GLM4_BINARY + "' train --model '" +
                            glm4::testing::kSource + "/tests/data/tiny_glm4' --data '" + data +
                            "' --out '" + out +
                            "' --iters 4 --batch-size 2 --save-every 2 --steps-per-eval 1000";
  Result r =
      glm4::testing::run_program("bash", {"-c", "trap '' XFSZ; ulimit -f 300; exec " + train});
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("glm4: error: HDF5 \"" + out + "/checkpoint.h5.tmp\""), std::string::npos)
      << r.output;
  EXPECT_TRUE(std::filesystem::exists(out + "/adapter_model.safetensors")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out + "/checkpoint.h5.tmp"));
  EXPECT_FALSE(std::filesystem::exists(out + "/checkpoint.h5"));
}

// A file or folder where the other is expected, named with its flag (no library text such as
// "basic_filebuf::underflow" or nlohmann's "syntax error while parsing value").
TEST(CliErrors, FilesAndFoldersInTheWrongPlaceAreNamedWithTheirFlag) {
  TempDir tmp;
  const std::string file = (tmp / "notes.txt").string(), dir = (tmp / "empty").string();
  std::ofstream(file) << "hello";
  std::filesystem::create_directories(dir);
  const std::string model_dir = "a model directory (config.json, weights, tokenizer)";
  Result gen = run({"generate", "--model", file, "--prompt", "hi"});
  EXPECT_EQ(gen.status, 1);
  EXPECT_EQ(first_line(gen),
            "glm4: error: --model: " + file + ": is a file, expected " + model_dir);
  Result train = run({"train", "--model", file, "--data", dir, "--out", (tmp / "o").string()});
  EXPECT_EQ(first_line(train),
            "glm4: error: --model " + file + ": is a file, expected " + model_dir);
  Result no_config = run({"train", "--model", dir, "--data", dir, "--out", (tmp / "o").string()});
  EXPECT_EQ(first_line(no_config),
            "glm4: error: --model " + dir + ": no config.json, expected " + model_dir);
  Result resume = run({"train", "--model", kModel, "--data", glm4::testing::kFinetune, "--out",
                       (tmp / "o").string(), "--resume", file});
  EXPECT_EQ(first_line(resume).rfind("glm4: error: --resume " + file + ": ", 0), 0u)
      << resume.output;
  Result init = run({"train", "--model", kModel, "--data", glm4::testing::kFinetune, "--out",
                     (tmp / "o").string(), "--init-adapter", dir, "--iters", "1"});
  EXPECT_EQ(init.status, 1);
  EXPECT_NE(init.output.find("glm4: error: --init-adapter " + dir + ": "), std::string::npos)
      << init.output;  // after the model's load line
  Result tools = run({"generate", "--model", kModel, "--chat", "--prompt", "hi", "--tools", dir});
  EXPECT_EQ(first_line(tools), "glm4: error: --tools " + dir + ": is a directory, expected a file");
  Result input = run({"tokenizer", "train", "--input", dir, "--out", (tmp / "t").string()});
  EXPECT_EQ(first_line(input), "glm4: error: --input " + dir + ": is a directory, expected a file");
  // plot: a file that is not metrics, a folder without them; a run folder is read.
  Result plot = run({"plot", file, "--out", (tmp / "p.svg").string()});
  EXPECT_EQ(first_line(plot), "glm4: error: " + file +
                                  ":1: invalid JSON (expected the metrics.jsonl glm4 train "
                                  "writes)");
  Result plot_dir = run({"plot", dir, "--out", (tmp / "p.svg").string()});
  EXPECT_EQ(first_line(plot_dir), "glm4: error: " + dir +
                                      "/metrics.jsonl: no such file (expected the metrics of a "
                                      "training run's --out)");
  std::ofstream(tmp / "empty" / "metrics.jsonl") << R"({"step": 1, "loss": 2.5})"
                                                 << "\n";
  EXPECT_EQ(run({"plot", dir, "--out", (tmp / "p.svg").string()}).status, 0);
  EXPECT_TRUE(std::filesystem::exists(tmp / "p.svg"));
}

TEST(CliErrors, ValuesOutOfRangeAndUnknownTargetsNameTheFlag) {
  TempDir tmp;
  Result group =
      run({"quantize", "--model", kModel, "--out", (tmp / "q").string(), "--group-size", "7"});
  EXPECT_EQ(group.status, 1);
  EXPECT_EQ(first_line(group), "glm4: error: --group-size 7: not supported (32, 64 or 128)");
  EXPECT_FALSE(std::filesystem::exists(tmp / "q"));
  Result examples = run(
      {"evaluate", "--model", kModel, "--data", glm4::testing::kFinetune, "--max-examples", "-1"});
  EXPECT_EQ(first_line(examples), "glm4: error: --max-examples: must be >= 0, got -1");
  Result targets = run({"train", "--model", kModel, "--data", glm4::testing::kFinetune, "--out",
                        (tmp / "o").string(), "--iters", "1", "--lora-targets", "bogus_proj"});
  EXPECT_EQ(targets.status, 1);
  EXPECT_NE(targets.output.find("glm4: error: --lora-targets: unknown LoRA target module "
                                "\"bogus_proj\""),
            std::string::npos)
      << targets.output;
}

// CLI11's own wording ("A subcommand is required", a positional's lower-case name, unexpected
// arguments listed last first) in the house style.
TEST(CliErrors, MissingSubcommandsPositionalsAndUnknownFlags) {
  Result adapter = run({"adapter"});
  EXPECT_EQ(adapter.status, 1);
  EXPECT_EQ(first_line(adapter), "glm4: error: glm4 adapter: expected a subcommand (convert)");
  Result plot = run({"plot"});
  EXPECT_EQ(first_line(plot), "glm4: error: METRICS is required");
  Result none = run({});
  EXPECT_EQ(first_line(none).rfind("glm4: error: expected a subcommand (init, ", 0), 0u)
      << none.output;
  Result chat = run({"generate", "--model", kModel, "--prompt", "hi", "--chat-format", "glm4"});
  EXPECT_EQ(first_line(chat), "glm4: error: --chat-format: unknown flag");
  Result two = run({"generate", "--model", kModel, "--prompt", "hi", "--colour", "red", "--fast"});
  EXPECT_EQ(first_line(two), "glm4: error: --colour, --fast: unknown flags");
}

}  // namespace
}  // namespace glm4
