// Ctrl-C during `glm4 train` on the embedded model: the step at hand finishes and is saved, the
// command that resumes is printed, the status is 130 (143 for SIGTERM), and resuming ends where
// an uninterrupted run ends, bit for bit. A second Ctrl-C quits at once.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "io/safetensors.h"
#include "tests/support/repo_paths.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"
#include "train/training_state.h"

extern char** environ;

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

constexpr int kIters = 40;

// No periodic save or evaluation unless `eval_every` says.
std::vector<std::string> train_args(const fs::path& out, const std::string& eval_every = "1000",
                                    const std::string& val_batches = "1") {
  return {"train",
          "--model",
          kModel,
          "--data",
          kFinetune,
          "--out",
          out.string(),
          "--iters",
          std::to_string(kIters),
          "--batch-size",
          "2",
          "--learning-rate",
          "1e-3",
          "--lora-dropout",
          "0.1",
          "--save-every",
          "1000",
          "--steps-per-eval",
          eval_every,
          "--val-batches",
          val_batches,
          "--seed",
          "2",
          "--threads",
          "1"};
}

// The training lines of metrics.jsonl by step.
std::map<int64_t, double> losses(const fs::path& metrics) {
  std::map<int64_t, double> out;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    json j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("loss")) out[j["step"]] = j["loss"];
  }
  return out;
}

std::map<std::string, std::vector<float>> adapter(const fs::path& dir) {
  std::map<std::string, std::vector<float>> out;
  auto file = SafetensorsFile::open(dir / "adapter_model.safetensors");
  for (const TensorInfo& t : file->tensors()) out[t.name] = read_f32(t);
  return out;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Starts `glm4 train` (validating every `eval_every` steps on `val_batches` batches) with stdout
// and stderr into `log`, waits until it has logged `steps` steps, sends `signals`, each after the
// run said it had the one before, and returns the wait status.
int interrupt(const fs::path& out, const fs::path& log, int steps, std::vector<int> signals,
              const std::string& eval_every = "1000", const std::string& val_batches = "1") {
  std::vector<std::string> args = train_args(out, eval_every, val_batches);
  args.insert(args.begin(), GLM4_BINARY);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  pid_t pid;
  EXPECT_EQ(posix_spawn(&pid, GLM4_BINARY, &files, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&files);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  int status = 0;
  while (int64_t(losses(out / "metrics.jsonl").size()) < steps &&
         std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      ADD_FAILURE() << "the run ended before step " << steps << ": " << slurp(log);
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (size_t i = 0; i < signals.size(); ++i) {
    while (i > 0 && slurp(log).find("stopping after this step") == std::string::npos &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ::kill(pid, signals[i]);
  }
  waitpid(pid, &status, 0);
  return status;
}

TEST(Interrupt, CtrlCSavesTheStepAndResumingEndsAsAnUninterruptedRun) {
  TempDir tmp;
  ASSERT_TRUE(succeeds(run(train_args(tmp / "whole"))));

  const int status = interrupt(tmp / "cut", tmp / "cut.log", 2, {SIGINT});
  const std::string log = slurp(tmp / "cut.log");
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 130) << log;
  const fs::path checkpoint = tmp / "cut" / "checkpoint.h5";
  ASSERT_TRUE(fs::exists(checkpoint)) << log;  // --save-every 1000: saved for the signal
  const int64_t step = read_checkpoint_summary(checkpoint).state.step;
  EXPECT_GE(step, 2);
  EXPECT_LT(step, kIters) << "the signal came after the run had finished";
  EXPECT_EQ(int64_t(losses(tmp / "cut" / "metrics.jsonl").size()), step);  // the last step saved
  EXPECT_NE(log.find("stopped by SIGINT after step " + std::to_string(step) + " of 40"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("to continue: glm4 train --resume " + checkpoint.string()), std::string::npos)
      << log;
  EXPECT_TRUE(fs::exists(tmp / "cut" / "adapter_model.safetensors"));
  for (const auto& e : fs::directory_iterator(tmp / "cut"))
    EXPECT_NE(e.path().extension(), ".tmp") << e.path();

  Result resumed = run({"train", "--resume", checkpoint.string()});
  ASSERT_TRUE(succeeds(resumed));
  const auto whole = losses(tmp / "whole" / "metrics.jsonl");
  const auto cut = losses(tmp / "cut" / "metrics.jsonl");
  ASSERT_EQ(cut.size(), size_t(kIters));
  EXPECT_EQ(cut, whole);  // every step's loss, the last one included
  EXPECT_EQ(adapter(tmp / "cut"), adapter(tmp / "whole"));
}

TEST(Interrupt, SigtermStopsAlikeWithStatus143) {
  TempDir tmp;
  const int status = interrupt(tmp / "run", tmp / "run.log", 1, {SIGTERM});
  const std::string log = slurp(tmp / "run.log");
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 143) << log;
  EXPECT_NE(log.find("stopped by SIGTERM"), std::string::npos) << log;
  EXPECT_TRUE(fs::exists(tmp / "run" / "checkpoint.h5"));
}

TEST(Interrupt, ASecondCtrlCQuitsAtOnce) {
  TempDir tmp;
  // Each step validates on 20 batches: a second signal comes while the first step is not done.
  const int status = interrupt(tmp / "run", tmp / "run.log", 1, {SIGINT, SIGINT}, "1", "20");
  const std::string log = slurp(tmp / "run.log");
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 130) << log;
  EXPECT_EQ(log.find("to continue"), std::string::npos) << log;  // gone before saving
}

}  // namespace
}  // namespace glm4
