// Generation speed on a random model of configs/mid.json (infer/generator.h): prefill a
// 512-token prompt, then decode 128 tokens greedily, for each stored weight form (f32, bf16, f16,
// q4, q8: benchmarks/bench_model.h) and --compute; next to the decode floor, the memory
// bandwidth measured in the same run (a streaming read of 2 GiB) divided by the weight bytes
// one token reads. --model DIR runs a model directory instead (e.g. from glm4 init --bits 4),
// its weights held as --memory says (auto, huge_pages, mmap: load_model's FileResidency); the
// first run's prefill (the first prompt of a process) is printed beside the best. --adapter DIR
// applies a LoRA adapter live (unmerged, as `glm4 generate --adapter` does) to a --model run;
// --kv-cache bf16 holds the model's KV cache in bf16 (generate's --kv-cache). The probe runs
// again after each row's decode, and a comment line under the row gives that floor too: on a
// shared host the probe moves by a quarter from one minute to the next. Another comment line gives
// the parallel loops a decode token runs and the share of its time spent between them (one thread
// working, base/parallel.h's loop_clock), what keeps a MoE decode off its floor.
// Usage: bench_generate [--config configs/mid.json] [--dtypes f32,bf16,f16,q4,q8] [--compute auto]
//                       [--prompt 512] [--tokens 128] [--reps 2] [--threads 2] [--model DIR]
//                       [--memory auto|huge_pages|mmap] [--adapter DIR] [--kv-cache f32|bf16]
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "autograd/weight.h"
#include "base/dtype.h"
#include "base/parallel.h"
#include "base/peak_rss.h"
#include "benchmarks/bandwidth_probe.h"
#include "benchmarks/bench_flags.h"
#include "benchmarks/bench_model.h"
#include "infer/cached_forward.h"
#include "infer/generator.h"
#include "model/adapter/adapter_io.h"
#include "model/compute_choice.h"
#include "model/config.h"
#include "model/glm4_model.h"
#include "model/save.h"

using namespace glm4;

namespace {

struct Options {
  std::string config =
      (std::filesystem::path(__FILE__).parent_path().parent_path() / "configs/mid.json").string();
  std::vector<std::string> dtypes{"f32", "bf16", "f16"};
  std::string compute = "auto";
  std::string model;    // a model directory instead of random weights
  std::string adapter;  // a LoRA adapter applied live to --model
  FileResidency memory = FileResidency::kAuto;
  int64_t prompt = 512;
  int tokens = 128;
  int reps = 2;
  int threads = 2;
  DType kv_cache = DType::F32;
};

// CPU seconds this process has used (all its threads): other processes' load does not inflate
// it, so with --threads 1 it gives one core's rate on a shared machine.
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&] { return bench::flag_value(argc, argv, i); };
    if (a == "--config")
      o.config = value();
    else if (a == "--dtypes")
      o.dtypes = split_commas(value());
    else if (a == "--prompt")
      o.prompt = std::stoll(value());
    else if (a == "--tokens")
      o.tokens = std::stoi(value());
    else if (a == "--compute")
      o.compute = value();
    else if (a == "--reps")
      o.reps = std::max(1, std::stoi(value()));
    else if (a == "--threads")
      o.threads = std::stoi(value());
    else if (a == "--model")
      o.model = value();
    else if (a == "--adapter")
      o.adapter = value();
    else if (a == "--kv-cache") {
      const std::string v = value();
      if (!parse_kv_cache_name(v, &o.kv_cache)) {
        std::fprintf(stderr, "--kv-cache %s: expected f32 or bf16\n", v.c_str());
        return 2;
      }
    } else if (a == "--memory") {
      const std::string m = value();
      if (m == "auto")
        o.memory = FileResidency::kAuto;
      else if (m == "huge_pages")
        o.memory = FileResidency::kHugePages;
      else if (m == "mmap")
        o.memory = FileResidency::kMapped;
      else {
        std::fprintf(stderr, "--memory %s: expected auto, huge_pages or mmap\n", m.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "unknown flag %s (see the header of bench_generate.cpp)\n", a.c_str());
      return 2;
    }
  }
  set_max_threads(o.threads);
  if (o.kv_cache == DType::BF16) std::printf("# KV cache in bf16 (--kv-cache bf16)\n");
  if (!o.adapter.empty() && o.model.empty()) {
    std::fprintf(stderr, "--adapter %s needs --model (the adapter's base)\n", o.adapter.c_str());
    return 2;
  }
  try {
    if (!o.model.empty()) {
      o.config = o.model;
      o.dtypes = {"file"};
    }
    ModelConfig config = load_model_config(o.config);
    std::mt19937_64 rng(1);
    std::vector<int32_t> prompt(size_t(o.prompt));
    for (int32_t& t : prompt) t = int32_t(2 + rng() % uint64_t(config.vocab_size - 2));

    const double bandwidth = bench::bandwidth_probe_gbs() * 1e9;
    std::printf(
        "# bench_generate: %s, random weights, prompt %ld tokens, %d greedy tokens, %d threads,"
        " best of %d runs, --compute %s\n# decode tok/s = forward passes / s (the first token comes"
        " from the prefill logits); floor = %.1f GB/s (measured now) / weight bytes per token\n",
        o.config.c_str(), long(o.prompt), o.tokens, o.threads, o.reps, o.compute.c_str(),
        bandwidth / 1e9);
    std::printf(
        "# cpu t/s: the same per CPU second of this process (one core's rate with --threads 1)\n");
    std::printf("%-5s %11s %11s %11s %9s %11s %8s %10s %8s %12s %11s  %s\n", "dtype", "prefill t/s",
                "1st prefill", "decode t/s", "ms/token", "floor t/s", "%floor", "weight MB",
                "RSS MB", "prefill cpu", "decode cpu", "kernels");
    std::fflush(stdout);
    for (const std::string& name : o.dtypes) {
      reset_peak_rss();  // each row's own peak, not the probe's or an earlier row's
      std::unique_ptr<Glm4Model> owned =
          name == "file" ? load_model(o.model, o.memory) : bench::make_model(config, name);
      if (name == "file") std::printf("# %s\n", owned->loaded.describe().c_str());
      if (!o.adapter.empty()) {
        const std::string warning = load_adapter(*owned, o.adapter, o.model);
        std::printf("# adapter %s applied live%s%s\n", o.adapter.c_str(),
                    warning.empty() ? "" : ": ", warning.c_str());
      }
      Glm4Model& model = *owned;
      const ComputeChoice compute = apply_compute_flag(model, o.compute);
      GenerationConfig gc;
      gc.max_tokens = o.tokens;  // greedy (temperature 0), no stop ids: exactly o.tokens tokens
      gc.prefill_chunk = std::max<int64_t>(o.prompt, 1);
      gc.kv_cache_dtype = o.kv_cache;
      Generator gen(model, gc);
      double prefill = 0, first_prefill = 0, decode = 0, prefill_cpu = 0, decode_cpu = 0;
      double loops_a_pass = 0, serial_share = 0;  // the fastest decode's
      for (int r = 0; r < o.reps; ++r) {
        const double c0 = cpu_seconds();
        gen.start(prompt);
        const double c1 = cpu_seconds();
        int64_t steps = 0;
        const LoopClock before = loop_clock();
        while (gen.next()) ++steps;
        const LoopClock after = loop_clock();
        const double c2 = cpu_seconds();
        prefill_cpu = std::max(prefill_cpu, double(o.prompt) / (c1 - c0));
        if (steps > 1) decode_cpu = std::max(decode_cpu, double(steps - 1) / (c2 - c1));
        GenerationStats s = gen.stats();
        prefill = std::max(prefill, s.prefill_tokens_per_second());
        if (r == 0) first_prefill = s.prefill_tokens_per_second();
        if (s.generated_tokens > 1 && s.decode_seconds > 0) {
          const double rate = double(s.generated_tokens - 1) / s.decode_seconds;
          if (rate > decode) {
            loops_a_pass = double(after.loops - before.loops) / double(s.generated_tokens - 1);
            serial_share = std::max(0.0, 1 - (after.seconds - before.seconds) / s.decode_seconds);
          }
          decode = std::max(decode, rate);
        }
      }
      const double bytes = bench::decode_weight_bytes(model), floor = bandwidth / bytes;
      std::printf("%-5s %11.1f %11.1f %11.1f %9.2f %11.1f %7.0f%% %10.0f %8.0f %12.1f %11.1f  %s\n",
                  name.c_str(), prefill, first_prefill, decode, 1e3 / decode, floor,
                  100 * decode / floor, bench::matrix_bytes(model) / 1048576.0, peak_rss_mb(),
                  prefill_cpu, decode_cpu, kernel_report(compute).describe().c_str());
      std::printf(
          "#   decode: %.0f parallel loops a token; %.0f%% of its time outside them, one thread "
          "working\n",
          loops_a_pass, 100 * serial_share);
      // The probe again once this row's decode is done (its model freed first, so that no row's
      // peak RSS holds a model and the probe together): how far the floor moved meanwhile.
      owned.reset();
      const double after = bench::bandwidth_probe_gbs() * 1e9;
      std::printf("#   probe after this row: %.1f GB/s, floor %.1f t/s, decode %.0f%% of it\n",
                  after / 1e9, after / bytes, 100 * decode * bytes / after);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_generate: %s\n", e.what());
    return 1;
  }
  return 0;
}
