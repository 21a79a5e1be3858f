// `mpirun -np 2 glm4 train` on loopback against one process on the same global batch: LoRA and
// --full (sharded AdamW) give the same losses, validation losses and weights; a training state
// resumes onto another rank count; a rank that fails or dies ends the job, in bounded time. The
// same parity on glm4_moe and glm4_moe_lite, whose ranks route their rows to different experts.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "autograd/node.h"
#include "io/safetensors.h"
#include "model/forward_context.h"
#include "model/glm4_model.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using glm4::testing::Result;
using glm4::testing::run;
using glm4::testing::run_program;
using glm4::testing::succeeds;
using glm4::testing::TempDir;
namespace fs = std::filesystem;
using nlohmann::json;

constexpr double kRelative = 1e-6;
constexpr int kTimeLimit = 120;  // seconds for one mpirun; a hang fails the test instead of CI

#ifdef GLM4_MPIEXEC
const char* const kMpiexec = GLM4_MPIEXEC;
#else
const char* const kMpiexec = nullptr;
#endif

// mpirun -np `ranks` glm4 train ARGS under `timeout` (status 124: it hung). Root may run Open
// MPI only with the two variables, set here for this command alone.
Result mpi_train(int ranks, const std::vector<std::string>& args, const std::string& fault = "") {
  std::vector<std::string> cmd{"OMPI_ALLOW_RUN_AS_ROOT=1",
                               "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                               "OMPI_MCA_btl_vader_single_copy_mechanism=none",
                               "GLM4_FAULT=" + fault,
                               "timeout",
                               "-k",
                               "10",
                               std::to_string(kTimeLimit),
                               kMpiexec,
                               "-np",
                               std::to_string(ranks),
                               "--oversubscribe",
                               "--bind-to",
                               "none",
                               "-x",
                               "GLM4_FAULT",
                               GLM4_BINARY,
                               "train"};
  // Under scripts/test.sh --sanitize: Open MPI's libraries have no frame pointers, so only the
  // slow unwinder lets LeakSanitizer see that its leaks come from Open MPI (and suppress them).
  if (const char* asan = std::getenv("ASAN_OPTIONS"))
    cmd.insert(cmd.begin(), std::string("ASAN_OPTIONS=") + asan + ":fast_unwind_on_malloc=0");
  cmd.insert(cmd.end(), args.begin(), args.end());
  return run_program("env", cmd);
}

Result one_process(std::vector<std::string> args) {
  args.insert(args.begin(), "train");
  return run(args);
}

void write_jsonl(const fs::path& file, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::ofstream f(file);
  for (int i = 0; i < n; ++i) {
    std::vector<int> ids(6 + rng() % 27);
    for (int& id : ids) id = 1 + int(rng() % 500);
    f << json{{"input_ids", ids}}.dump() << "\n";
  }
}

struct Metrics {
  std::map<int64_t, double> loss, val_loss;
  json last;  // the last step's line
};
Metrics read_metrics(const fs::path& file) {
  Metrics m;
  std::ifstream f(file);
  std::string line;
  while (std::getline(f, line)) {
    json j = json::parse(line);
    if (j.contains("loss")) {
      m.loss[j["step"]] = j["loss"];
      m.last = j;
    }
    if (j.contains("val_loss")) m.val_loss[j["step"]] = j["val_loss"];
  }
  return m;
}

void expect_close(const std::map<int64_t, double>& got, const std::map<int64_t, double>& want,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [step, v] : want)
    EXPECT_LE(std::abs(got.at(step) - v), kRelative * std::abs(v))
        << what << " at step " << step << ": " << got.at(step) << " vs " << v;
}

// Every tensor of two safetensors files, to `tolerance` of the tensor's largest magnitude.
void expect_same_tensors(const fs::path& a, const fs::path& b, double tolerance) {
  auto fa = SafetensorsFile::open(a), fb = SafetensorsFile::open(b);
  ASSERT_EQ(fa->tensors().size(), fb->tensors().size());
  for (const TensorInfo& t : fa->tensors()) {
    std::vector<float> x = read_f32(t), y = read_f32(fb->at(t.name));
    ASSERT_EQ(x.size(), y.size()) << t.name;
    double scale = 0, worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      scale = std::max(scale, double(std::abs(y[i])));
      worst = std::max(worst, double(std::abs(x[i] - y[i])));
    }
    EXPECT_LE(worst, tolerance * scale) << t.name;
  }
}

struct MpiTrain : ::testing::Test {
  TempDir tmp;
  fs::path data = tmp / "data";
  std::string model = std::string(GLM4_TEST_DATA) + "/tiny_glm4";
  void SetUp() override {
    if (!kMpiexec) GTEST_SKIP() << "built without MPI";
    fs::create_directories(data);
    write_jsonl(data / "train.jsonl", 26, 1);
    write_jsonl(data / "valid.jsonl", 7, 2);
  }
  // The run's flags; `changes` replace defaults or add flags ("" = a flag without a value).
  std::vector<std::string> flags(
      const std::string& out,
      const std::vector<std::pair<std::string, std::string>>& changes = {}) {
    std::vector<std::pair<std::string, std::string>> f{
        {"--model", model},
        {"--data", data.string()},
        {"--out", (tmp / out).string()},
        {"--iters", "20"},
        {"--batch-size", "2"},
        {"--grad-accum", "2"},
        {"--learning-rate", "3e-3"},
        {"--warmup", "2"},
        {"--lora-rank", "4"},
        {"--lora-targets", "all-linear"},
        {"--steps-per-eval", "10"},
        {"--val-batches", "-1"},
        {"--save-every", "10"},
        {"--steps-per-report", "100"},
        {"--threads", "1"},
        {"--seed", "3"},
        {"--sync-check-every", "5"},
    };
    for (const auto& [key, value] : changes) {
      auto it = std::find_if(f.begin(), f.end(), [&](const auto& kv) { return kv.first == key; });
      if (it != f.end())
        it->second = value;
      else
        f.push_back({key, value});
    }
    std::vector<std::string> args;
    for (const auto& [key, value] : f) {
      args.push_back(key);
      if (!value.empty()) args.push_back(value);
    }
    return args;
  }
  // Losses to 1e-6 relative; weights to `weights_tolerance` of each tensor's largest magnitude.
  void expect_same_run(const std::string& a, const std::string& b, const std::string& weights,
                       double weights_tolerance = kRelative) {
    Metrics ma = read_metrics(tmp / a / "metrics.jsonl"),
            mb = read_metrics(tmp / b / "metrics.jsonl");
    EXPECT_EQ(ma.loss.size(), 20u);
    expect_close(ma.loss, mb.loss, "loss");
    expect_close(ma.val_loss, mb.val_loss, "val_loss");
    expect_same_tensors(tmp / a / weights, tmp / b / weights, weights_tolerance);
  }
};

const std::vector<std::pair<std::string, std::string>> kFull{
    {"--full", ""}, {"--learning-rate", "1e-3"}, {"--bucket-mb", "0.05"}};  // a dozen buckets

TEST_F(MpiTrain, LoraOnTwoRanksIsOneProcessOnTheSameGlobalBatch) {
  ASSERT_TRUE(succeeds(one_process(flags("one"))));
  Result two = mpi_train(2, flags("two"));
  ASSERT_TRUE(succeeds(two));
  expect_same_run("two", "one", "adapter_model.safetensors");
  Metrics m = read_metrics(tmp / "two" / "metrics.jsonl");
  EXPECT_EQ(m.last["ranks"], 2);
  EXPECT_EQ(m.last["rank_peak_rss_mb"].size(), 2u);
  EXPECT_EQ(two.output.find("trained 20 steps"),
            two.output.rfind("trained 20 steps"));  // rank 0 reports
}

// 3 rows a step: rank 0 reads 1, rank 1 reads 2. The weight gradient of a cut batch is summed in
// another fp32 order inside the matmuls, as it is when one process runs the same rows as 3
// micro-batches of 1; AdamW's first, sign-like steps carry that to about 5e-5 of the largest
// weight in both cases (measured), while the losses stay within 1e-7.
TEST_F(MpiTrain, LoraWithBatchesCutBetweenRanks) {
  const std::vector<std::pair<std::string, std::string>> cut{{"--batch-size", "3"},
                                                             {"--grad-accum", "1"}};
  ASSERT_TRUE(succeeds(one_process(flags("one", cut))));
  ASSERT_TRUE(succeeds(mpi_train(2, flags("two", cut))));
  expect_same_run("two", "one", "adapter_model.safetensors", 2e-4);
}

TEST_F(MpiTrain, FullTrainingWithShardedAdamWAndBuckets) {
  ASSERT_TRUE(succeeds(one_process(flags("one", kFull))));
  ASSERT_TRUE(succeeds(mpi_train(2, flags("two", kFull))));
  expect_same_run("two", "one", "model.safetensors");
}

TEST_F(MpiTrain, FullTrainingResumesOntoAnotherRankCount) {
  auto first_half = [&](const std::string& out) {
    auto c = kFull;
    c.push_back({"--iters", "10"});
    return flags(out, c);
  };
  auto second_half = [&](const std::string& out) {
    auto c = kFull;
    c.push_back({"--resume", (tmp / out / "checkpoint.h5").string()});
    return flags(out, c);
  };
  ASSERT_TRUE(succeeds(one_process(flags("one", kFull))));
  ASSERT_TRUE(succeeds(mpi_train(2, first_half("two_then_one"))));
  ASSERT_TRUE(succeeds(one_process(second_half("two_then_one"))));
  expect_same_run("two_then_one", "one", "model.safetensors");
  ASSERT_TRUE(succeeds(one_process(first_half("one_then_two"))));
  ASSERT_TRUE(succeeds(mpi_train(2, second_half("one_then_two"))));
  expect_same_run("one_then_two", "one", "model.safetensors");
}

TEST_F(MpiTrain, RankThatRaisesEndsTheJobNamingIt) {
  Result r = mpi_train(2, flags("out", {{"--iters", "100000"}}), "1:3:raise");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.status, 124) << "the job hung";
  EXPECT_NE(r.output.find("error on rank 1 of 2: GLM4_FAULT: rank 1 raises at step 3"),
            std::string::npos)
      << r.output;
}

TEST_F(MpiTrain, RankKilledBySignalEndsTheJob) {
  auto t0 = std::chrono::steady_clock::now();
  Result r = mpi_train(2, flags("out", {{"--iters", "100000"}}), "1:3:kill");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.status, 124) << "the job hung";
  EXPECT_LT(seconds, kTimeLimit);
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
}

TEST_F(MpiTrain, RanksThatDivergeAreCaught) {
  Result r = mpi_train(2, flags("out"), "1:3:perturb");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("the parameters of rank(s) 1 differ from rank 0's after step 5"),
            std::string::npos)
      << r.output;
}

// Per MoE layer, the experts that some token of one row `ids` is routed to by `model` without
// adapters: the routing of a training step while every LoRA B is still zero, as in step 1.
std::vector<std::set<int32_t>> experts_chosen(const Glm4Model& model,
                                              const std::vector<int32_t>& ids) {
  NoGradGuard no_grad;
  ForwardContext ctx;
  ctx.seq = int64_t(ids.size());
  for (size_t t = 0; t < ids.size(); ++t) ctx.positions.push_back(int32_t(t));
  std::vector<RouterTrace> traces;
  ctx.router_traces = &traces;
  model.forward_hidden(ids, ctx);
  std::vector<std::set<int32_t>> chosen;
  for (const RouterTrace& t : traces) chosen.emplace_back(t.experts.begin(), t.experts.end());
  return chosen;
}

// The MoE models on 4 training rows of one length (no padding, whose tokens would be routed too),
// 2 rows a step as 2 micro-batches of one row: on 2 ranks, one row each.
struct MpiTrainMoe : MpiTrain {
  std::vector<std::vector<int32_t>> rows;
  const std::vector<std::pair<std::string, std::string>> one_row_a_rank{{"--batch-size", "1"},
                                                                        {"--grad-accum", "2"}};

  void use_model(const std::string& dir, int length) {
    model = std::string(GLM4_TEST_DATA) + "/" + dir;
    std::mt19937_64 rng(5);
    for (const auto& [file, n] : {std::pair{"train.jsonl", 4}, std::pair{"valid.jsonl", 3}}) {
      std::ofstream f(data / file);
      for (int i = 0; i < n; ++i) {
        std::vector<int32_t> ids(static_cast<size_t>(length));
        for (int32_t& id : ids) id = 1 + int32_t(rng() % 250);
        f << json{{"input_ids", ids}}.dump() << "\n";
        if (std::string(file) == "train.jsonl") rows.push_back(ids);
      }
    }
  }
  // Whichever two rows a step pairs, each rank routes some token to an expert that no token of
  // the other rank's row chose (in step 1; later steps move the routing): that expert's adapters
  // have a gradient on one rank and none on the other, and the sum must still be the one
  // process's gradient.
  void expect_each_row_has_an_expert_the_others_lack() {
    auto loaded = load_model(model);
    std::vector<std::vector<std::set<int32_t>>> chosen;
    for (const std::vector<int32_t>& r : rows) chosen.push_back(experts_chosen(*loaded, r));
    ASSERT_FALSE(chosen[0].empty()) << "no MoE layer";
    for (size_t i = 0; i < rows.size(); ++i)
      for (size_t j = 0; j < rows.size(); ++j) {
        if (i == j) continue;
        bool one_sided = false;
        for (size_t l = 0; l < chosen[i].size(); ++l)
          for (int32_t e : chosen[i][l]) one_sided |= chosen[j][l].count(e) == 0;
        EXPECT_TRUE(one_sided) << "every expert of row " << i << " is also one of row " << j;
      }
  }
  // As in LoraOnTwoRanksIsOneProcessOnTheSameGlobalBatch, each rank holds whole micro-batches,
  // so the sum in rank order is the one process's accumulation: the same numbers (to the bit, as
  // measured), whichever experts each rank's row left without a gradient.
  void expect_parity(std::vector<std::pair<std::string, std::string>> changes,
                     const std::string& weights) {
    changes.insert(changes.end(), one_row_a_rank.begin(), one_row_a_rank.end());
    ASSERT_TRUE(succeeds(one_process(flags("one", changes))));
    ASSERT_TRUE(succeeds(mpi_train(2, flags("two", changes))));
    expect_same_run("two", "one", weights);
  }
};

// all-linear puts one adapter on every routed expert of each MoE layer.
TEST_F(MpiTrainMoe, LoraOnRoutedExpertsOnTwoRanksIsOneProcess) {
  use_model("moe/tiny_moe", 5);
  expect_each_row_has_an_expert_the_others_lack();
  expect_parity({}, "adapter_model.safetensors");
}

TEST_F(MpiTrainMoe, FullTrainingWithShardedAdamW) {
  use_model("moe/tiny_moe", 5);
  expect_each_row_has_an_expert_the_others_lack();
  expect_parity(kFull, "model.safetensors");
}

TEST_F(MpiTrainMoe, LiteLoraOnRoutedExpertsOnTwoRanksIsOneProcess) {
  use_model("moe_lite/tiny_lite", 3);
  expect_each_row_has_an_expert_the_others_lack();
  expect_parity({}, "adapter_model.safetensors");
}

TEST_F(MpiTrainMoe, LiteFullTrainingWithShardedAdamW) {
  use_model("moe_lite/tiny_lite", 3);
  expect_each_row_has_an_expert_the_others_lack();
  expect_parity(kFull, "model.safetensors");
}

}  // namespace
}  // namespace glm4
