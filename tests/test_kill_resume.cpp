// A training run killed with SIGKILL at a random step: every output file it leaves is complete
// or absent, and --resume from its checkpoint.h5 ends with the adapter an uninterrupted run
// writes, bit for bit, with each step logged once.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "base/check.h"
#include "io/safetensors.h"
#include "model/adapter/adapter_io.h"
#include "model/glm4_model.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

extern char** environ;

namespace glm4 {
namespace {

using glm4::testing::run;
using glm4::testing::succeeds;
using glm4::testing::TempDir;
namespace fs = std::filesystem;
using nlohmann::json;

const std::string kTinyGlm4 = std::string(GLM4_TEST_DATA) + "/tiny_glm4";

std::vector<std::string> train_args(const fs::path& data, const fs::path& out, int iters) {
  return {"train",
          "--model",
          kTinyGlm4,
          "--data",
          data.string(),
          "--out",
          out.string(),
          "--iters",
          std::to_string(iters),
          "--batch-size",
          "2",
          "--learning-rate",
          "3e-3",
          "--lora-dropout",
          "0.1",
          "--lora-targets",
          "q_proj,v_proj,gate_up_proj",
          "--steps-per-eval",
          "6",
          "--save-every",
          "4",
          "--seed",
          "3",
          "--threads",
          "1"};
}

// The last "step" of a training line in metrics.jsonl, 0 if none yet.
int64_t last_step(const fs::path& metrics) {
  std::ifstream in(metrics);
  std::string line;
  int64_t step = 0;
  while (std::getline(in, line)) {
    json j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("loss")) step = j["step"];
  }
  return step;
}

std::map<std::string, std::vector<float>> adapter_tensors(const fs::path& dir) {
  std::map<std::string, std::vector<float>> out;
  auto file = SafetensorsFile::open(dir / "adapter_model.safetensors");
  for (const TensorInfo& t : file->tensors()) out[t.name] = read_f32(t);
  return out;
}

TEST(KillResume, SigkillAtARandomStepThenResumeEqualsAnUninterruptedRun) {
  TempDir tmp;
  fs::create_directories(tmp / "data");
  {
    std::mt19937_64 rng(4);
    std::ofstream train(tmp / "data" / "train.jsonl"), valid(tmp / "data" / "valid.jsonl");
    for (int i = 0; i < 40; ++i) {
      json ids = json::array();
      for (int t = 0, n = 10 + int(rng() % 20); t < n; ++t) ids.push_back(1 + int(rng() % 500));
      (i < 32 ? train : valid) << json{{"input_ids", ids}}.dump() << "\n";
    }
  }
  // Steps of this model take milliseconds: the run goes on for 90 steps and more past the
  // latest kill point, so a poll delayed by a loaded machine still kills it mid-run.
  const int iters = 120;
  ASSERT_TRUE(succeeds(run(train_args(tmp / "data", tmp / "whole", iters))));

  std::random_device seed_source;
  const int kill_at = 6 + int(seed_source() % 24);  // somewhere in steps 6..29
  std::printf("[ kill ] SIGKILL once step %d is logged\n", kill_at);
  std::vector<std::string> args = train_args(tmp / "data", tmp / "killed", iters);
  args.insert(args.begin(), GLM4_BINARY);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  ASSERT_EQ(posix_spawn(&pid, GLM4_BINARY, nullptr, nullptr, argv.data(), environ), 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);  // a hang fails
  while (last_step(tmp / "killed" / "metrics.jsonl") < kill_at &&
         std::chrono::steady_clock::now() < deadline) {
    int status;
    ASSERT_EQ(waitpid(pid, &status, WNOHANG), 0) << "the run ended before step " << kill_at;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ::kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  const int64_t logged = last_step(tmp / "killed" / "metrics.jsonl");
  ASSERT_LT(logged, iters) << "killed after the run had finished";

  // What the killed run left is whole or absent: the adapter and best/ load, the checkpoint holds
  // a step that was saved.
  ASSERT_TRUE(fs::exists(tmp / "killed" / "checkpoint.h5")) << "no save before step " << logged;
  for (const fs::path& dir : {tmp / "killed", tmp / "killed" / "best"}) {
    if (!fs::exists(dir / "adapter_model.safetensors")) continue;
    auto model = load_model(kTinyGlm4);
    EXPECT_NO_THROW(load_adapter(*model, dir)) << dir;
  }

  ASSERT_TRUE(succeeds(run([&] {
    std::vector<std::string> a = train_args(tmp / "data", tmp / "killed", iters);
    a.insert(a.end(), {"--resume", (tmp / "killed" / "checkpoint.h5").string()});
    return a;
  }())));
  EXPECT_EQ(adapter_tensors(tmp / "killed"), adapter_tensors(tmp / "whole"));
  EXPECT_EQ(adapter_tensors(tmp / "killed" / "best"), adapter_tensors(tmp / "whole" / "best"));

  // Each training step logged once, with the losses of the uninterrupted run.
  auto losses = [](const fs::path& metrics) {
    std::map<int64_t, double> by_step;
    std::ifstream in(metrics);
    std::string line;
    while (std::getline(in, line)) {
      json j = json::parse(line);
      if (!j.contains("loss")) continue;
      EXPECT_FALSE(by_step.count(j["step"])) << "step " << j["step"] << " logged twice";
      by_step[j["step"]] = j["loss"];
    }
    return by_step;
  };
  EXPECT_EQ(losses(tmp / "killed" / "metrics.jsonl"), losses(tmp / "whole" / "metrics.jsonl"));
  for (const auto& e : fs::recursive_directory_iterator(tmp / "killed"))
    EXPECT_NE(e.path().extension(), ".tmp") << "a temporary file was left behind: " << e.path();
}

}  // namespace
}  // namespace glm4
