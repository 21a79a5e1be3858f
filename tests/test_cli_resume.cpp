// `glm4 train --resume`: the checkpoint holds the run's settings and the fingerprints of its model
// and data, so --resume alone continues the same run; a flag given again is applied and reported
// or refused naming it; and no command writes over a run or a file without --force.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "tests/support/repo_paths.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using glm4::testing::kModel;
using glm4::testing::Result;
using glm4::testing::run;
using glm4::testing::succeeds;
using glm4::testing::TempDir;
namespace fs = std::filesystem;
using nlohmann::json;

// Prompt/completion records, so that --mask-prompt changes what is learnt.
void write_data(const fs::path& dir, int records) {
  fs::create_directories(dir);
  std::ofstream train(dir / "train.jsonl"), valid(dir / "valid.jsonl");
  for (int i = 0; i < records; ++i) {
    json r = {{"prompt", "Count from " + std::to_string(i) + ":"},
              {"completion", " " + std::to_string(i + 1) + " " + std::to_string(i + 2)}};
    (i % 5 == 4 ? valid : train) << r.dump() << "\n";
  }
}

std::vector<std::string> fresh_run(const fs::path& data, const fs::path& out, int iters) {
  return {"train",
          "--model",
          kModel,
          "--data",
          data.string(),
          "--out",
          out.string(),
          "--iters",
          std::to_string(iters),
          "--batch-size",
          "2",
          "--learning-rate",
          "2e-3",
          "--mask-prompt",
          "--lora-dropout",
          "0.1",
          "--save-every",
          "3",
          "--steps-per-eval",
          "3",
          "--seed",
          "5",
          "--threads",
          "1"};
}

std::map<std::string, std::vector<float>> adapter(const fs::path& dir) {
  std::map<std::string, std::vector<float>> out;
  auto file = SafetensorsFile::open(dir / "adapter_model.safetensors");
  for (const TensorInfo& t : file->tensors()) out[t.name] = read_f32(t);
  return out;
}

std::map<int64_t, json> metrics_by_step(const fs::path& file) {
  std::map<int64_t, json> out;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    json j = json::parse(line);
    if (j.contains("loss")) out[j["step"].get<int64_t>()] = j;
  }
  return out;
}

bool mentions(const Result& r, const std::string& text) {
  return r.output.find(text) != std::string::npos;
}

struct ResumeCli : ::testing::Test {
  TempDir tmp;
  fs::path data = tmp / "data";
  void SetUp() override { write_data(data, 30); }
};

// The case: --mask-prompt and --learning-rate left out on resume used to fall back to the
// defaults without a word. Now --resume alone (not even --model or --data) continues with the
// stored settings and ends where an uninterrupted run ends, bit for bit.
TEST_F(ResumeCli, ResumeAloneContinuesTheSameRun) {
  ASSERT_TRUE(succeeds(run(fresh_run(data, tmp / "whole", 6))));
  ASSERT_TRUE(succeeds(run(fresh_run(data, tmp / "parts", 3))));
  const std::string checkpoint = (tmp / "parts" / "checkpoint.h5").string();
  Result r = run({"train", "--resume", checkpoint, "--iters", "6"});
  ASSERT_TRUE(succeeds(r));
  EXPECT_TRUE(mentions(r, "resuming run " + (tmp / "parts").string() + " from step 3 of 6"))
      << r.output;
  EXPECT_TRUE(mentions(r, "--iters 3 -> 6 from step 3")) << r.output;
  EXPECT_EQ(adapter(tmp / "parts"), adapter(tmp / "whole"));
  auto whole = metrics_by_step(tmp / "whole" / "metrics.jsonl");
  auto parts = metrics_by_step(tmp / "parts" / "metrics.jsonl");
  ASSERT_EQ(parts.size(), 6u);
  for (int64_t step = 1; step <= 6; ++step)
    EXPECT_EQ(parts[step]["loss"], whole[step]["loss"]) << "step " << step;
}

// A flag that is sound to change from a step on is applied and said; the next steps use it.
TEST_F(ResumeCli, ALearningRateGivenAgainIsAppliedAndReported) {
  ASSERT_TRUE(succeeds(run(fresh_run(data, tmp / "run", 3))));
  Result r = run({"train", "--resume", (tmp / "run" / "checkpoint.h5").string(), "--iters", "5",
                  "--learning-rate", "1e-3", "--steps-per-report", "1"});
  ASSERT_TRUE(succeeds(r));
  EXPECT_TRUE(mentions(r, "--learning-rate 0.002 -> 0.001 from step 3")) << r.output;
  EXPECT_TRUE(mentions(r, "--steps-per-report 10 -> 1 from step 3")) << r.output;
  auto m = metrics_by_step(tmp / "run" / "metrics.jsonl");
  EXPECT_EQ(m[3]["lr"], 2e-3);
  EXPECT_EQ(m[4]["lr"], 1e-3);
  EXPECT_EQ(m[5]["lr"], 1e-3);
}

// Flags that would make the run another run are refused, each named with both values, before
// anything is loaded or written; the same values given again are fine.
TEST_F(ResumeCli, FlagsThatMakeAnotherRunAreRefusedNamingThem) {
  ASSERT_TRUE(succeeds(run(fresh_run(data, tmp / "run", 3))));
  const std::string checkpoint = (tmp / "run" / "checkpoint.h5").string();
  const std::string before = adapter(tmp / "run").begin()->first;
  Result r = run({"train", "--resume", checkpoint, "--iters", "6", "--lora-rank", "4",
                  "--batch-size", "4", "--seed", "5"});
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(mentions(r, "--lora-rank 4 (the run has 16)")) << r.output;
  EXPECT_TRUE(mentions(r, "--batch-size 4 (the run has 2)")) << r.output;
  EXPECT_FALSE(mentions(r, "--seed")) << r.output;  // the value the run has
  EXPECT_FALSE(mentions(r, "parameters, the run has")) << r.output;

  for (const std::vector<std::string>& flags :
       std::vector<std::vector<std::string>>{{"--lora-targets", "q_proj,v_proj"},
                                             {"--lora-alpha", "8"},
                                             {"--pack"},
                                             {"--max-seq-length", "64"},
                                             {"--grad-accum", "2"},
                                             {"--fine-tune-type", "dora"}}) {
    std::vector<std::string> args = {"train", "--resume", checkpoint, "--iters", "6"};
    args.insert(args.end(), flags.begin(), flags.end());
    Result refused = run(args);
    EXPECT_EQ(refused.status, 1) << flags[0] << ": " << refused.output;
    EXPECT_TRUE(mentions(refused, flags[0] + " ")) << refused.output;
    EXPECT_TRUE(mentions(refused, "leave this flag out")) << refused.output;
  }
  EXPECT_EQ(metrics_by_step(tmp / "run" / "metrics.jsonl").size(), 3u);  // nothing ran
}

// The checkpoint knows its model's and data's fingerprints: other data under the same or another
// path is refused naming --data; the same data under another path is fine.
TEST_F(ResumeCli, OtherDataIsRefusedTheSameDataMovedIsNot) {
  ASSERT_TRUE(succeeds(run(fresh_run(data, tmp / "run", 3))));
  const std::string checkpoint = (tmp / "run" / "checkpoint.h5").string();
  write_data(tmp / "other", 31);
  Result r =
      run({"train", "--resume", checkpoint, "--iters", "4", "--data", (tmp / "other").string()});
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(mentions(r, "--data " + (tmp / "other").string() + ": the data differs")) << r.output;

  fs::copy(data, tmp / "moved", fs::copy_options::recursive);
  ASSERT_TRUE(succeeds(
      run({"train", "--resume", checkpoint, "--iters", "4", "--data", (tmp / "moved").string()})));

  // The checkpoint now names the moved data; edited, it is other data.
  std::ofstream(tmp / "moved" / "train.jsonl", std::ios::app)
      << json{{"prompt", "x"}, {"completion", "y"}}.dump() << "\n";
  r = run({"train", "--resume", checkpoint, "--iters", "5"});
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(mentions(r, "--data " + (tmp / "moved").string() + ": the data differs")) << r.output;
}

// `train --out` on an earlier run refuses, says what is there and how to go on, and leaves the
// run as it was; --force starts afresh.
TEST_F(ResumeCli, TrainRefusesToWriteOverARun) {
  ASSERT_TRUE(succeeds(run(fresh_run(data, tmp / "run", 3))));
  const auto adapter_before = adapter(tmp / "run");
  Result r = run(fresh_run(data, tmp / "run", 6));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(mentions(r, "--out " + (tmp / "run").string() + ": directory is not empty"))
      << r.output;
  EXPECT_TRUE(mentions(r, "checkpoint.h5")) << r.output;
  EXPECT_TRUE(mentions(r, "a training run at step 3 of 3")) << r.output;
  EXPECT_TRUE(mentions(r, "glm4 train --resume " + (tmp / "run" / "checkpoint.h5").string()))
      << r.output;
  EXPECT_TRUE(mentions(r, "--force")) << r.output;
  EXPECT_EQ(adapter(tmp / "run"), adapter_before);
  EXPECT_EQ(metrics_by_step(tmp / "run" / "metrics.jsonl").size(), 3u);

  std::vector<std::string> forced = fresh_run(data, tmp / "run", 2);
  forced.push_back("--force");
  ASSERT_TRUE(succeeds(run(forced)));
  EXPECT_EQ(metrics_by_step(tmp / "run" / "metrics.jsonl").size(), 2u);

  // A resumed run writes into its own directory, or into an empty one.
  fs::create_directories(tmp / "busy");
  std::ofstream(tmp / "busy" / "notes.txt") << "mine";
  r = run({"train", "--resume", (tmp / "run" / "checkpoint.h5").string(), "--iters", "4", "--out",
           (tmp / "busy").string()});
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(mentions(r, "notes.txt")) << r.output;
}

// export gguf, export gguf-lora and plot refuse an existing output file unless --force.
TEST_F(ResumeCli, ExportAndPlotRefuseAnExistingFile) {
  ASSERT_TRUE(succeeds(run(fresh_run(data, tmp / "run", 1))));
  struct Case {
    std::vector<std::string> args;
    fs::path out;
  };
  const std::vector<Case> cases = {
      {{"export", "gguf", "--model", kModel, "--out", (tmp / "m.gguf").string()}, tmp / "m.gguf"},
      {{"export", "gguf-lora", "--model", kModel, "--adapter", (tmp / "run").string(), "--out",
        (tmp / "a.gguf").string()},
       tmp / "a.gguf"},
      {{"plot", (tmp / "run" / "metrics.jsonl").string(), "--out", (tmp / "p.svg").string()},
       tmp / "p.svg"},
  };
  for (const Case& c : cases) {
    std::ofstream(c.out) << "the user's file";
    Result r = run(c.args);
    EXPECT_EQ(r.status, 1) << c.args[0] << ": " << r.output;
    EXPECT_TRUE(mentions(r, "--out " + c.out.string() + ": the file exists")) << r.output;
    EXPECT_TRUE(mentions(r, "--force")) << r.output;
    std::ifstream in(c.out);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "the user's file");
    std::vector<std::string> forced = c.args;
    forced.push_back("--force");
    EXPECT_TRUE(succeeds(run(forced))) << c.args[0];
    EXPECT_GT(fs::file_size(c.out), 15u);
  }
}

}  // namespace
}  // namespace glm4
