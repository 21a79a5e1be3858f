// Time of one LoRA training step (forward + backward + AdamW, train_step) on a random model of
// configs/mid.json with frozen weights in --dtype (fp32 by default; q4 / q8 = QLoRA over an mlx
// affine base, benchmarks/bench_model.h), or a model directory (--model), LoRA r=16 alpha=32 on
// every linear (q,k,v,o,gate_up,down; a glm4_moe config's experts each their own): tokens/s, peak
// tensor memory and peak RSS, with and without gradient checkpointing. Each case runs in a child
// process of its own, so that its peak RSS is its own.
// Usage: bench_lora_step [--config configs/mid.json] [--shapes 4x256,1x512] [--checkpoint 0,1]
//                        [--steps 3] [--threads 2] [--dtype f32|bf16|f16|q4|q8] [--compute
//                        auto|f32|bf16]
//                        [--model DIR]
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "autograd/tensor.h"
#include "autograd/weight.h"
#include "base/check.h"
#include "base/parallel.h"
#include "base/peak_rss.h"
#include "benchmarks/bench_flags.h"
#include "benchmarks/bench_model.h"
#include "dataset/batch.h"
#include "model/compute_choice.h"
#include "model/config.h"
#include "model/glm4_model.h"
#include "model/save.h"
#include "train/adamw.h"
#include "train/train_step.h"

extern char** environ;
using namespace glm4;

namespace {

const std::string kDefaultConfig =
    (std::filesystem::path(__FILE__).parent_path().parent_path() / "configs/mid.json").string();

struct Case {
  int64_t B = 4, T = 256;
  bool checkpoint = false;
};

struct Options {
  std::string config = kDefaultConfig;
  std::vector<Case> cases;
  int steps = 3;
  int threads = 2;
  std::string dtype = "f32";     // storage of the frozen weights
  std::string compute = "auto";  // --compute of the frozen products
  std::string model;             // a model directory instead of random weights
  bool child = false;
};

// "4x256,1x512" x "0,1" -> cases, largest first.
std::vector<Case> make_cases(const std::string& shapes, const std::string& ckpt) {
  std::vector<Case> out;
  for (const std::string& s : split_commas(shapes)) {
    Case c;
    c.B = std::stoll(s.substr(0, s.find('x')));
    c.T = std::stoll(s.substr(s.find('x') + 1));
    for (char k : ckpt)
      if (k == '0' || k == '1') out.push_back({c.B, c.T, k == '1'});
  }
  return out;
}

// CPU seconds of this process (all threads): not inflated by other processes' load.
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

Batch random_batch(int64_t B, int64_t T, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Example> rows(static_cast<size_t>(B));
  for (Example& ex : rows)
    for (int64_t t = 0; t < T; ++t) ex.ids.push_back(int32_t(2 + rng() % uint64_t(vocab - 2)));
  for (Example& ex : rows) ex.labels = ex.ids;
  return make_batch(rows, 0, B, 0);
}

// Runs one case in this process and prints its table row.
int run_case(const Options& o, const Case& c) {
  set_max_threads(o.threads);
  ModelConfig config = load_model_config(o.model.empty() ? o.config : o.model);
  std::unique_ptr<Glm4Model> owned =
      o.model.empty() ? bench::make_model(config, o.dtype) : load_model(o.model);
  Glm4Model& model = *owned;
  apply_compute_flag(model, o.compute);
  LoraConfig lora;
  lora.rank = 16;
  lora.alpha = 32;
  lora.targets = {"all-linear"};  // the model resolves it: gate_up_proj, or each expert's three
  model.add_lora(lora, 0);
  AdamW optimizer(model.lora_parameters(),
                  {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01});
  StepOptions so;
  so.lr = 1e-4;
  so.recompute_layers = c.checkpoint;

  // Matmul parameters a token multiplies (the layers' linears, for a MoE layer its routed and
  // shared experts, and lm_head): 4 FLOPs a token each for a LoRA step (forward, input
  // gradient), 6 with checkpointing (the forward twice).
  const ModelConfig& m = config;
  const double h = double(m.hidden_size), hd = double(m.head_dim);
  const double attention =
      h * hd * double(m.num_attention_heads) * 2 + h * hd * double(m.num_key_value_heads) * 2;
  const double dense_mlp = 3.0 * h * double(m.intermediate_size);
  const double moe_mlp = 3.0 * h * double(m.moe_intermediate_size) *
                         double(m.num_experts_per_tok + m.n_shared_experts);
  const int64_t moe_layers =
      m.family == ModelConfig::Family::Glm4Moe ? m.num_hidden_layers - m.first_k_dense_replace : 0;
  const double matmul_params = attention * double(m.num_hidden_layers) +
                               dense_mlp * double(m.num_hidden_layers - moe_layers) +
                               moe_mlp * double(moe_layers) + h * double(m.vocab_size);

  const Batch batch = random_batch(c.B, c.T, m.vocab_size, 1);
  train_step(model, optimizer, {batch}, so);  // warm-up: allocator, OpenBLAS buffers, AdamW state
  TensorMemory::reset_peak();
  reset_peak_rss();
  std::vector<double> seconds, cpu;
  double loss = 0;
  for (int s = 0; s < o.steps; ++s) {
    auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_seconds();
    StepResult r = train_step(model, optimizer, {batch}, so);
    cpu.push_back(cpu_seconds() - c0);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (s == 0) loss = r.loss;
  }
  std::sort(cpu.begin(), cpu.end());
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  const double tokens = double(c.B * c.T);
  const double flops = (c.checkpoint ? 6.0 : 4.0) * matmul_params * tokens;
  const std::string shape = std::to_string(c.B) + "x" + std::to_string(c.T);
  std::printf("%11s %4s %5d %8.3f %8.3f %9.1f %10.1f %9.1f %10.0f %9.0f %9.0f %7.3f\n",
              shape.c_str(), c.checkpoint ? "yes" : "no", o.steps, median, seconds.front(),
              tokens / median, tokens / cpu[cpu.size() / 2], flops / median / 1e9,
              double(TensorMemory::peak_bytes()) / 1048576.0, peak_rss_mb(),
              bench::matrix_bytes(model) / 1048576.0, loss);
  std::fflush(stdout);
  return 0;
}

int spawn_case(const Options& o, const Case& c, const char* self) {
  std::vector<std::string> args{self,           "--child",
                                "--config",     o.config,
                                "--shapes",     std::to_string(c.B) + "x" + std::to_string(c.T),
                                "--checkpoint", c.checkpoint ? "1" : "0",
                                "--steps",      std::to_string(o.steps),
                                "--threads",    std::to_string(o.threads),
                                "--dtype",      o.dtype,
                                "--compute",    o.compute};
  if (!o.model.empty()) {
    args.push_back("--model");
    args.push_back(o.model);
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) return 1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string shapes = "4x256,1x512", ckpt = "0,1";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&] { return bench::flag_value(argc, argv, i); };
    if (a == "--config")
      o.config = value();
    else if (a == "--shapes")
      shapes = value();
    else if (a == "--checkpoint")
      ckpt = value();
    else if (a == "--steps")
      o.steps = std::max(1, std::stoi(value()));
    else if (a == "--threads")
      o.threads = std::stoi(value());
    else if (a == "--dtype")
      o.dtype = value();
    else if (a == "--compute")
      o.compute = value();
    else if (a == "--child")
      o.child = true;
    else if (a == "--model")
      o.model = value();
    else {
      std::fprintf(stderr, "unknown flag %s (see the header of bench_lora_step.cpp)\n", a.c_str());
      return 2;
    }
  }
  o.cases = make_cases(shapes, ckpt);
  try {
    if (o.child) return run_case(o, o.cases.at(0));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_lora_step: %s\n", e.what());
    return 1;
  }
  if (!o.model.empty()) {
    o.config = o.model;
    o.dtype = "file";
  }
  std::printf(
      "# bench_lora_step: %s, %s frozen weights, --compute %s, LoRA r=16 alpha=32 on every "
      "linear (q,k,v,o and the MLP's, or each expert's, projections), AdamW; %d threads;\n"
      "# s/step: median (best) of %d timed steps after one warm-up; GF/s counts %s;\n"
      "# tensor MB / RSS MB: peaks over the timed steps (TensorMemory, VmHWM); weight MB: frozen "
      "Weights\n",
      o.config.c_str(), o.dtype.c_str(), o.compute.c_str(), o.threads, o.steps,
      "4 (6 with checkpointing) FLOPs/token per matmul parameter");
  std::printf(
      "# tok/cpu-s: tokens per CPU second of the process (median step), which other processes' "
      "load does not inflate\n");
  std::printf("%11s %4s %5s %8s %8s %9s %10s %9s %10s %9s %9s %7s\n", "BxT", "ckpt", "steps",
              "s/step", "best", "tokens/s", "tok/cpu-s", "GF/s", "tensor MB", "RSS MB", "weight MB",
              "loss");
  std::fflush(stdout);
  int rc = 0;
  for (const Case& c : o.cases) rc |= spawn_case(o, c, argv[0]);
  return rc;
}
