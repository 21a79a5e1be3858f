// Continuous batching speed (serve/scheduler.h, what `glm4 serve` runs) on a random model of
// configs/mid.json: aggregate decode tokens/s of N concurrent greedy streams against one stream,
// time to first token when N requests arrive together, and when one joins N-1 that are decoding.
// Usage: bench_serve [--config configs/mid.json] [--dtype f32] [--streams 8] [--prompt 128]
//                    [--tokens 128] [--reps 2] [--threads 2] [--clock wall|cpu]
// --clock cpu reads the process CPU time divided by the thread count instead of the wall clock
// (as bench_bf16_gemm): on a machine shared with other jobs it measures what the server does
// while it runs (spinning TBB threads count against it), where the wall clock measures the
// neighbours too.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/dtype.h"
#include "base/parallel.h"
#include "benchmarks/bench_flags.h"
#include "model/config.h"
#include "model/glm4_model.h"
#include "model/save.h"
#include "serve/scheduler.h"

using namespace glm4;
using namespace glm4::serve;

namespace {

bool g_cpu_clock = false;
int g_threads = 2;

// Seconds on the chosen clock.
double now() {
  if (!g_cpu_clock)
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec)) / g_threads;
}

struct Options {
  std::string config =
      (std::filesystem::path(__FILE__).parent_path().parent_path() / "configs/mid.json").string();
  std::string dtype = "f32";
  int streams = 8;
  int64_t prompt = 128;
  int tokens = 128;
  int reps = 2;
  int threads = 2;
};

struct Stream {
  double submitted = 0, first = 0, done = 0;  // now() at these moments
  std::chrono::steady_clock::time_point wall_submitted, wall_first, wall_done;
  int64_t tokens = 0;
};

double wall_seconds(std::chrono::steady_clock::time_point a,
                    std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Submits one request per prompt at `at[i]` seconds after the start; a thread per request
// blocks on its events (no polling that would take CPU from the forward passes).
std::vector<Stream> run(Scheduler& s, const std::vector<std::vector<int32_t>>& prompts, int tokens,
                        const std::vector<double>& at) {
  std::vector<Stream> out(prompts.size());
  std::vector<std::thread> waiters;
  const auto start = std::chrono::steady_clock::now();  // arrivals follow the wall clock
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::this_thread::sleep_until(start +
                                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                      std::chrono::duration<double>(at[i])));
    SlotRequest r;
    r.prompt = prompts[i];
    r.max_tokens = tokens;  // greedy, no stop ids: exactly `tokens` tokens
    Scheduler::Admission a;
    out[i].submitted = now();
    out[i].wall_submitted = std::chrono::steady_clock::now();
    std::shared_ptr<SlotHandle> h = s.submit(r, &a);
    if (!h) throw std::runtime_error("request refused");
    waiters.emplace_back([h, &stream = out[i]] {
      SlotEvent e;
      for (;;) {
        if (!h->next(&e, std::chrono::seconds(60))) continue;
        if (!e.ids.empty() && stream.tokens == 0) {
          stream.first = now();
          stream.wall_first = std::chrono::steady_clock::now();
        }
        stream.tokens += int64_t(e.ids.size());
        if (e.done) break;
      }
      stream.done = now();
      stream.wall_done = std::chrono::steady_clock::now();
    });
  }
  for (std::thread& t : waiters) t.join();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&] { return bench::flag_value(argc, argv, i); };
    if (a == "--config")
      o.config = value();
    else if (a == "--dtype")
      o.dtype = value();
    else if (a == "--streams")
      o.streams = std::max(1, std::stoi(value()));
    else if (a == "--prompt")
      o.prompt = std::max<int64_t>(1, std::stoll(value()));
    else if (a == "--tokens")
      o.tokens = std::max(2, std::stoi(value()));
    else if (a == "--reps")
      o.reps = std::max(1, std::stoi(value()));
    else if (a == "--threads")
      o.threads = std::stoi(value());
    else if (a == "--clock")
      g_cpu_clock = value() == "cpu";
    else {
      std::fprintf(stderr, "unknown flag %s (see the header of bench_serve.cpp)\n", a.c_str());
      return 2;
    }
  }
  set_max_threads(o.threads);
  g_threads = std::max(1, o.threads);
  try {
    ModelConfig config = load_model_config(o.config);
    DType dtype;
    if (!parse_dtype(o.dtype, &dtype)) {
      std::fprintf(stderr, "unknown dtype %s\n", o.dtype.c_str());
      return 2;
    }
    Glm4Model model(config);
    init_random(model, 0, dtype);
    std::mt19937_64 rng(1);
    std::vector<std::vector<int32_t>> prompts(size_t(o.streams));
    for (auto& p : prompts)
      for (int64_t t = 0; t < o.prompt; ++t)
        p.push_back(int32_t(2 + rng() % uint64_t(config.vocab_size - 2)));
    SchedulerConfig sc;
    sc.max_batch = o.streams;
    Scheduler s(model, nullptr, sc);

    std::printf(
        "# bench_serve: %s (%s), random weights, %d threads, prompts of %ld tokens, %d greedy "
        "tokens "
        "each, best of %d, clock: %s\n# decode t/s = tokens after each stream's first / time from "
        "the last "
        "first token to the last token (aggregate over streams)\n",
        o.config.c_str(), o.dtype.c_str(), o.threads, long(o.prompt), o.tokens, o.reps,
        g_cpu_clock ? "process CPU time / threads" : "wall");
    std::fflush(stdout);
    double one = 0, many = 0, ttft_one = 1e9, ttft_mean = 1e9, ttft_max = 1e9, join = 1e9;
    for (int rep = 0; rep < o.reps; ++rep) {
      std::vector<Stream> a = run(s, {prompts[0]}, o.tokens, {0.0});
      one = std::max(one, double(a[0].tokens - 1) / (a[0].done - a[0].first));
      ttft_one = std::min(ttft_one, a[0].first - a[0].submitted);

      std::vector<Stream> b = run(s, prompts, o.tokens, std::vector<double>(prompts.size(), 0.0));
      double last_first = 0, last_done = 0, sum_ttft = 0, max_ttft = 0;
      int64_t decoded = 0;
      for (const Stream& x : b) {
        last_first = std::max(last_first, x.first);
        last_done = std::max(last_done, x.done);
        sum_ttft += x.first - x.submitted;
        max_ttft = std::max(max_ttft, x.first - x.submitted);
        decoded += x.tokens - 1;
      }
      many = std::max(many, double(decoded) / (last_done - last_first));
      ttft_mean = std::min(ttft_mean, sum_ttft / double(b.size()));
      ttft_max = std::min(ttft_max, max_ttft);

      // N-1 streams decoding, then one more arrives a third of the way into their replies (on
      // the wall clock: arrivals are real time).
      std::vector<double> at(prompts.size(), 0.0);
      at.back() = wall_seconds(b[0].wall_submitted, b[0].wall_first) +
                  0.33 * wall_seconds(b[0].wall_first, b[0].wall_done);
      std::vector<Stream> c = run(s, prompts, o.tokens, at);
      join = std::min(join, c.back().first - c.back().submitted);
    }
    std::printf("%-28s %10s %10s\n", "", "decode t/s", "TTFT ms");
    std::printf("%-28s %10.1f %10.1f\n", "1 stream", one, 1e3 * ttft_one);
    std::printf("%-28s %10.1f %10.1f (max %.1f)\n",
                (std::to_string(o.streams) + " streams, arriving together").c_str(), many,
                1e3 * ttft_mean, 1e3 * ttft_max);
    std::printf("%-28s %10s %10.1f\n",
                ("1 joining " + std::to_string(o.streams - 1) + " decoding").c_str(), "",
                1e3 * join);
    std::printf("aggregate speed-up: %.2fx one stream (%d rows per forward pass)\n", many / one,
                o.streams);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_serve: %s\n", e.what());
    return 1;
  }
  return 0;
}
