// Quantized (mlx affine) products on the mid config's linears (or GLM-4-9B-0414's with --shape
// 9b, or one GLM-4.7-Flash decode layer's with --shape flash: the latent attention's products,
// then the 4 routed experts and the shared one a token reads, gate and up fused): decode (M = 1)
// tokens/s and GB/s of weight bytes next to a streaming-read bandwidth probe and today's bf16
// dense decode, prefill GFLOP/s at M = 512, and the error of each product against fp64. With
// --shape 9b or flash the token is --layers decoder layers without the lm_head (whose weight
// would take most of the run to make).
// Usage: bench_quant [--bits 4,8] [--group 64] [--threads 2] [--kernels avx512,avx2,scalar,int8]
//                    [--reps N] [--probe-gib G] [--no-prefill] [--prefill-rows 512]
//                    [--shape mid|9b|flash] [--layers N]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "autograd/kernels/affine_pack.h"
#include "autograd/kernels/affine_quant.h"
#include "autograd/kernels/gemm.h"
#include "autograd/kernels/quant_linear.h"
#include "autograd/weight.h"
#include "base/memory.h"
#include "base/parallel.h"
#include "benchmarks/bench_flags.h"

using namespace glm4;

namespace {

struct Options {
  std::vector<int> bits{4, 8};
  int group = 64;
  int threads = 2;
  std::vector<std::string> kernels;  // empty: every one this CPU runs
  int reps = 20;
  double probe_gib = 2.25;
  bool prefill = true;
  int64_t prefill_rows = 512;
  std::string shape = "mid";
  int layers = 0;  // 0: the shape's own count
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return bench::flag_value(argc, argv, i); };
    if (a == "--bits") {
      o.bits.clear();
      for (auto& b : bench::split_commas(value())) o.bits.push_back(std::stoi(b));
    } else if (a == "--group")
      o.group = std::stoi(value());
    else if (a == "--threads")
      o.threads = std::stoi(value());
    else if (a == "--kernels")
      o.kernels = bench::split_commas(value());
    else if (a == "--prefill-rows")
      o.prefill_rows = std::stoll(value());
    else if (a == "--reps")
      o.reps = std::stoi(value());
    else if (a == "--probe-gib")
      o.probe_gib = std::stod(value());
    else if (a == "--no-prefill")
      o.prefill = false;
    else if (a == "--shape")
      o.shape = value();
    else if (a == "--layers")
      o.layers = std::stoi(value());
    else {
      std::fprintf(stderr, "unknown flag %s (see the header of bench_quant.cpp)\n", a.c_str());
      std::exit(2);
    }
  }
  if (o.kernels.empty()) {
    o.kernels = quant_kernels_supported();
    if (quant_int8_available()) o.kernels.push_back("int8");
  }
  return o;
}

double thread_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Best wall time of fn() over `reps` runs after one warm-up; *median gets the median. With
// cpu_time, the calling thread's CPU time instead (for one thread: what the work costs a core,
// whatever else the machine runs).
template <typename Fn>
double best_seconds(Fn&& fn, int reps, double* median = nullptr, bool cpu_time = false) {
  fn();
  std::vector<double> t;
  for (int n = 0; n < reps; ++n) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = thread_cpu_seconds();
    fn();
    t.push_back(cpu_time
                    ? thread_cpu_seconds() - c0
                    : std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  if (median) *median = t[t.size() / 2];
  return t.front();
}

// GB/s of a streaming read of `bytes` (summing 64-bit words on every thread); with cpu_time,
// on the calling thread alone, timed by its CPU time.
double bandwidth_probe(size_t bytes, int reps, bool cpu_time = false) {
  const size_t words = bytes / 8;
  std::unique_ptr<uint64_t[]> buf(new uint64_t[words]);
  parallel_for(int64_t(words), 1 << 20, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) buf[size_t(i)] = uint64_t(i);
  });
  constexpr int64_t kChunk = 1 << 18;
  const int64_t chunks = int64_t(words) / kChunk;
  volatile uint64_t sink = 0;
  const double sec = best_seconds(
      [&] {
        std::vector<uint64_t> sums(static_cast<size_t>(chunks));
        parallel_for(chunks, 8, [&](int64_t a, int64_t b) {
          for (int64_t c = a; c < b; ++c) {
            const uint64_t* p = buf.get() + c * kChunk;
            uint64_t s = 0;
            for (int64_t i = 0; i < kChunk; ++i) s += p[i];
            sums[size_t(c)] = s;
          }
        });
        for (uint64_t s : sums) sink = sink + s;
      },
      reps, nullptr, cpu_time);
  return double(chunks * kChunk * 8) / sec / 1e9;
}

struct Linear {
  const char* name;
  int64_t N, K;
};

// One decoder layer's products, the lm_head and the layers of a token.
struct Shape {
  std::vector<Linear> layer;
  Linear head;
  int layers;
  bool head_in_token;
};

// configs/mid.json: hidden 1024, 16 x 64 query heads, 2 kv heads, MLP 2816 with fused gate_up.
// configs/glm-4-9b-0414.json: hidden 4096, 32 x 128 query heads, 2 kv heads, MLP 13696.
// configs/glm-4.7-flash.json: hidden 2048, q_lora_rank 768, kv_lora_rank 512 + 64 rotary, 20
// heads of 192 + 64 (queries) and 192 + 256 (kv_b_proj), experts of 1536, 4 routed + 1 shared.
Shape shape_of(const Options& o) {
  Shape s;
  if (o.shape == "mid")
    s = {{{"q", 1024, 1024},
          {"k", 128, 1024},
          {"v", 128, 1024},
          {"o", 1024, 1024},
          {"gate_up", 5632, 1024},
          {"down", 1024, 2816}},
         {"lm_head", 32000, 1024},
         8,
         true};
  else if (o.shape == "9b")
    s = {{{"q", 4096, 4096},
          {"k", 256, 4096},
          {"v", 256, 4096},
          {"o", 4096, 4096},
          {"gate_up", 27392, 4096},
          {"down", 4096, 13696}},
         {"lm_head", 151552, 4096},
         4,
         false};
  else if (o.shape == "flash") {
    s = {{{"q_a", 768, 2048}, {"kv_a", 576, 2048}, {"q_b", 5120, 768}, {"kv_b", 8960, 512}},
         {"lm_head", 154880, 2048},
         8,
         false};
    s.layer.push_back({"o", 2048, 5120});
    for (int expert = 0; expert < 5; ++expert) {
      s.layer.push_back({"gate_up", 3072, 2048});
      s.layer.push_back({"down", 2048, 1536});
    }
  } else {
    std::fprintf(stderr, "--shape: expected mid, 9b or flash, got %s\n", o.shape.c_str());
    std::exit(2);
  }
  if (o.layers > 0) s.layers = o.layers;
  return s;
}

std::vector<const Linear*> token_linears(const Shape& shape) {
  std::vector<const Linear*> out;
  for (int l = 0; l < shape.layers; ++l)
    for (const Linear& s : shape.layer) out.push_back(&s);
  if (shape.head_in_token) out.push_back(&shape.head);
  return out;
}

std::vector<float> normal_vec(int64_t n, uint64_t seed, float sigma) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// Random bf16 weights of `s`, N(0, 0.02).
Weight dense_weight(const Linear& s, uint64_t seed) {
  const std::vector<float> w = normal_vec(s.N * s.K, seed, 0.02f);
  return Weight::from_f32(w.data(), s.N, s.K, DType::BF16);
}

// The product through kernel k: "int8" is quant_linear_forward_int8 (the decode of --compute
// bf16: 4 and 8 bits on AVX512-VNNI or on AVX2, which GLM4_QUANT_KERNEL=avx2 selects), the
// others quant_linear_forward with that kernel table.
void forward_with(const std::string& k, const float* x, int64_t M, int64_t K,
                  const QuantizedMatrix& q, float* y) {
  if (k == "int8" && quant_int8_supported(q))
    return quant_linear_forward_int8(x, M, K, q, y, false);
  if (k != "int8") set_quant_kernel(k);
  quant_linear_forward(x, M, K, q, y, false);
}

// A decode token: every linear once, M = 1, distinct weights (as a model's are).
struct Token {
  std::vector<QuantizedMatrix> quant;  // views into `arena`
  std::shared_ptr<void> arena;
  std::vector<Weight> dense;
  std::vector<float> x, y;
  size_t bytes = 0;
};

// The token's quantized weights in one anonymous mapping in 2 MB pages, as glm4's loader holds a
// model's (in 4 KB pages a token's gigabytes would cost a page walk every few kilobytes).
void place_in_huge_pages(Token& t, std::vector<QuantizedStorage>&& weights) {
  auto line = [](size_t n) { return (n + 63) / 64 * 64; };
  size_t total = 0;
  for (const QuantizedStorage& w : weights)
    total +=
        line(w.packed.size() * sizeof(uint32_t)) + line(w.scales.size()) + line(w.biases.size());
  auto* at = static_cast<uint8_t*>(map_anonymous(total, "bench_quant weights"));
  t.arena = std::shared_ptr<void>(at, [total](void* p) { unmap_anonymous(p, total); });
  auto copy = [&](const void* from, size_t n) {
    std::memcpy(at, from, n);
    const uint8_t* placed = at;
    at += line(n);
    return placed;
  };
  for (QuantizedStorage& w : weights) {
    QuantizedMatrix v = w.view();
    v.packed = copy(w.packed.data(), w.packed.size() * sizeof(uint32_t));
    v.scales = copy(w.scales.data(), w.scales.size());
    v.biases = copy(w.biases.data(), w.biases.size());
    t.quant.push_back(v);
    w = QuantizedStorage{};  // one copy at a time resident
  }
}

double token_seconds(Token& t, const std::vector<const Linear*>& ls, const std::string& kernel,
                     int reps, double* median, bool cpu_time = false) {
  return best_seconds(
      [&] {
        for (size_t i = 0; i < ls.size(); ++i) {
          if (!kernel.empty())
            forward_with(kernel, t.x.data(), 1, ls[i]->K, t.quant[i], t.y.data());
          else
            linear_forward(t.x.data(), 1, ls[i]->K, t.dense[i], t.y.data(), false, kF32Compute);
        }
      },
      reps, median, cpu_time);
}

// Tokens/s one core sustains: the token on one thread, timed by that thread's CPU time.
double core_tokens_per_second(Token& t, const std::vector<const Linear*>& ls,
                              const std::string& kernel, const Options& o) {
  set_max_threads(1);
  const double sec = token_seconds(t, ls, kernel, std::max(3, o.reps / 4), nullptr, true);
  set_max_threads(o.threads);
  return 1 / sec;
}

// y = X W^T in fp64 for X [M, K] and W given as doubles [N, K].
std::vector<double> fp64_product(const std::vector<float>& X, const std::vector<double>& W,
                                 int64_t M, int64_t N, int64_t K) {
  std::vector<double> y(size_t(M * N));
  parallel_for(N, 16, [&](int64_t n0, int64_t n1) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = n0; n < n1; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += double(X[size_t(m * K + k)]) * W[size_t(n * K + k)];
        y[size_t(m * N + n)] = s;
      }
  });
  return y;
}

std::vector<double> exact_dequantized(const QuantizedMatrix& q) {
  std::vector<double> out(size_t(q.rows * q.cols));
  std::vector<uint8_t> codes(size_t(q.cols));
  for (int64_t r = 0; r < q.rows; ++r) {
    unpack_codes(q.bits, q.row(r), 0, q.cols, codes.data());
    for (int64_t c = 0; c < q.cols; ++c)
      out[size_t(r * q.cols + c)] = double(q.scale(r, c / q.group_size)) * codes[size_t(c)] +
                                    double(q.bias(r, c / q.group_size));
  }
  return out;
}

// Root-mean-square of (got - ref) relative to the root-mean-square of ref.
template <typename T>
double rel_rms(const std::vector<T>& got, const std::vector<double>& ref) {
  double e = 0, r = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    e += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    r += ref[i] * ref[i];
  }
  return std::sqrt(e / r);
}

// llama.cpp-style int8 activations: per block of 32, scale = max|x| / 127, x ~ scale * round(x /
// scale).
std::vector<float> int8_activations(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    for (size_t i = b; i < b + 32; ++i) out[i] = d == 0 ? 0.0f : d * std::nearbyint(x[i] / d);
  }
  return out;
}

void error_report(const Options& o, int bits) {
  const Linear s = {"q", 1024, 1024};
  const Weight dense = dense_weight(s, 7);
  QuantizedStorage q = quantize_affine(DType::BF16, dense.data(), s.N, s.K, {bits, o.group}, "q");
  const std::vector<double> exact = exact_dequantized(q.view());
  std::vector<float> deq32(size_t(s.N * s.K));
  dequantize_tile_f32(q.view(), 0, s.N, 0, s.K, deq32.data(), s.K);
  const Weight fp32 = Weight::from_f32(deq32.data(), s.N, s.K);
  for (int64_t M : {int64_t{1}, int64_t{512}}) {
    const std::vector<float> x = normal_vec(M * s.K, 11, 1.0f);
    const std::vector<double> ref = fp64_product(x, exact, M, s.N, s.K);
    std::vector<float> y(size_t(M * s.N));
    linear_forward(x.data(), M, s.K, fp32, y.data(), false, kF32Compute);
    std::printf("error M=%-3ld %d-bit 1024x1024: fp32 GEMM on deq %.2e", long(M), bits,
                rel_rms(y, ref));
    for (const std::string& k : o.kernels) {
      forward_with(k, x.data(), M, s.K, q.view(), y.data());
      std::printf(" | %s %.2e", k.c_str(), rel_rms(y, ref));
    }
    if (M == 1) {
      const std::vector<float> x8 = int8_activations(x);
      std::vector<double> y8 = fp64_product(x8, exact, M, s.N, s.K);
      std::printf(" | int8 activations (exact product) %.2e", rel_rms(y8, ref));
    }
    std::printf("   (relative rms vs fp64)\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  set_max_threads(o.threads);
  init_blas();
  const std::string default_kernel = quant_kernel_name();
  std::printf("# bench_quant: %d threads, group %d, scales bf16; best of %d runs (median in ())\n",
              o.threads, o.group, o.reps);

  const double dram = bandwidth_probe(size_t(o.probe_gib * double(1ull << 30)), 5);
  const double cached = bandwidth_probe(size_t(64) << 20, 20);
  set_max_threads(1);
  const double dram_core = bandwidth_probe(size_t(o.probe_gib * double(1ull << 30)), 5, true);
  set_max_threads(o.threads);
  std::printf(
      "bandwidth probe: %.2f GiB streaming read %.1f GB/s (one core by CPU time %.1f GB/s); "
      "64 MiB %.1f GB/s\n",
      o.probe_gib, dram, dram_core, cached);

  const Shape shape = shape_of(o);
  const std::vector<const Linear*> ls = token_linears(shape);
  std::string products;
  for (const Linear& l : shape.layer)
    products += (products.empty() ? "" : ", ") + std::string(l.name);
  std::printf(
      "\n# decode: one token = %d layers x (%s)%s of the %s shape, M = 1, distinct weights\n",
      shape.layers, products.c_str(), shape.head_in_token ? " + lm_head" : "", o.shape.c_str());
  std::printf("# 1-core CPU = tokens/s of one thread by its CPU time (immune to other load)\n");
  std::printf("%-14s %-7s %9s %9s %9s %7s %12s\n", "weights", "kernel", "MB/token", "tokens/s",
              "(median)", "GB/s", "1-core CPU");
  {
    Token t;
    t.x = normal_vec(4 * 13696, 3, 1.0f);
    t.y.resize(size_t(shape.head.N));
    for (size_t i = 0; i < ls.size(); ++i) {
      t.dense.push_back(dense_weight(*ls[i], 100 + i));
      t.bytes += t.dense.back().bytes();
    }
    double median;
    const double sec = token_seconds(t, ls, "", o.reps, &median);
    std::printf("%-14s %-7s %9.1f %9.1f %9.1f %7.1f %12.1f\n", "bf16 dense", "today", t.bytes / 1e6,
                1 / sec, 1 / median, t.bytes / sec / 1e9, core_tokens_per_second(t, ls, "", o));
    for (int bits : o.bits) {
      Token q;
      q.x = t.x;
      q.y = t.y;
      std::vector<QuantizedStorage> weights;
      for (size_t i = 0; i < ls.size(); ++i) {
        weights.push_back(quantize_affine(DType::BF16, t.dense[i].data(), ls[i]->N, ls[i]->K,
                                          {bits, o.group}, ls[i]->name));
        q.bytes += weights.back().view().bytes();
      }
      place_in_huge_pages(q, std::move(weights));
      std::printf("# %d-bit weights in 2 MB pages: %.0f MB of this process in huge pages\n", bits,
                  anon_huge_page_bytes() / 1e6);
      for (const std::string& k : o.kernels) {
        const double s = token_seconds(q, ls, k, o.reps, &median);
        char name[32];
        std::snprintf(name, sizeof name, "%d-bit g%d", bits, o.group);
        std::printf("%-14s %-7s %9.1f %9.1f %9.1f %7.1f %12.1f\n", name, k.c_str(), q.bytes / 1e6,
                    1 / s, 1 / median, q.bytes / s / 1e9, core_tokens_per_second(q, ls, k, o));
      }
      set_quant_kernel(default_kernel);
    }
  }

  {
    // What the kernels cost a core when the weights are in its L2: the compute ceiling.
    const Linear s = {"l2", 2048, 1024};
    const Weight dense = dense_weight(s, 17);
    const std::vector<float> x = normal_vec(s.K, 5, 1.0f);
    std::vector<float> y(size_t(s.N));
    set_max_threads(1);
    auto ns = [&](auto&& fn) {
      return 1e9 * best_seconds(fn, o.reps * 2, nullptr, true) / double(s.N * s.K);
    };
    std::printf(
        "\n# compute ceiling: M = 1, one core, a 2048 x 1024 weight in L2, ns per weight by CPU "
        "time\n");
    std::printf("bf16 dense %.4f",
                ns([&] { linear_forward(x.data(), 1, s.K, dense, y.data(), false, kF32Compute); }));
    for (int bits : o.bits) {
      QuantizedStorage q =
          quantize_affine(DType::BF16, dense.data(), s.N, s.K, {bits, o.group}, "l2");
      for (const std::string& k : o.kernels) {
        std::printf(" | %d-bit %s %.4f", bits, k.c_str(),
                    ns([&] { forward_with(k, x.data(), 1, s.K, q.view(), y.data()); }));
      }
    }
    std::printf("\n");
    set_quant_kernel(default_kernel);
    set_max_threads(o.threads);
  }

  std::printf(
      "\n# decode per linear (M = 1, the same weights every call, so cache-resident when "
      "they fit): GB/s of weight bytes, kernel %s\n",
      default_kernel.c_str());
  std::printf("%-10s %-12s %10s", "linear", "N x K", "bf16 GB/s");
  for (int bits : o.bits) std::printf("  %d-bit GB/s (us)", bits);
  std::printf("\n");
  const std::vector<Linear>& layer = shape.layer;
  std::vector<const Linear*> per_linear = {&layer[0], &layer[1], &layer[4], &layer[5]};
  if (shape.head_in_token) per_linear.push_back(&shape.head);
  for (const Linear* s : per_linear) {
    const Weight dense = dense_weight(*s, 13);
    const std::vector<float> x = normal_vec(s->K, 5, 1.0f);
    std::vector<float> y(size_t(s->N));
    const double tb = best_seconds(
        [&] { linear_forward(x.data(), 1, s->K, dense, y.data(), false, kF32Compute); },
        o.reps * 5);
    char shape[32];
    std::snprintf(shape, sizeof shape, "%ldx%ld", long(s->N), long(s->K));
    std::printf("%-10s %-12s %10.1f", s->name, shape, dense.bytes() / tb / 1e9);
    for (int bits : o.bits) {
      QuantizedStorage q =
          quantize_affine(DType::BF16, dense.data(), s->N, s->K, {bits, o.group}, s->name);
      const double tq = best_seconds(
          [&] { quant_linear_forward(x.data(), 1, s->K, q.view(), y.data(), false); }, o.reps * 5);
      std::printf("  %9.1f (%6.1f)", q.view().bytes() / tq / 1e9, tq * 1e6);
    }
    std::printf("\n");
  }

  if (o.prefill) {
    std::printf(
        "\n# prefill: M = %ld, GFLOP/s = 2 M N K / best time (kernel %s for the tiles' "
        "dequantization; int8 = the int8 GEMM of --compute bf16)\n",
        long(o.prefill_rows), default_kernel.c_str());
    std::printf("%-10s %-12s %9s", "linear", "N x K", "bf16");
    const bool int8 = quant_int8_available();
    for (int bits : o.bits) std::printf("  %d-bit fwd  dgrad%s", bits, int8 ? "   int8" : "");
    std::printf("\n");
    const int64_t M = o.prefill_rows;
    const int64_t widest = std::max<int64_t>(shape.head.N, layer[4].N);
    const std::vector<float> x = normal_vec(M * widest, 5, 1.0f);  // dY of the lm_head too
    std::vector<float> y(size_t(M * widest));
    std::vector<const Linear*> prefill = {&layer[0], &layer[4], &layer[5]};
    if (shape.head_in_token) prefill.push_back(&shape.head);
    for (const Linear* s : prefill) {
      const Weight dense = dense_weight(*s, 9);
      const double flop = 2.0 * M * s->N * s->K;
      const double bf16 =
          flop /
          best_seconds(
              [&] { linear_forward(x.data(), M, s->K, dense, y.data(), false, kF32Compute); }, 3);
      char shape[32];
      std::snprintf(shape, sizeof shape, "%ldx%ld", long(s->N), long(s->K));
      std::printf("%-10s %-12s %9.1f", s->name, shape, bf16 / 1e9);
      for (int bits : o.bits) {
        QuantizedStorage q =
            quantize_affine(DType::BF16, dense.data(), s->N, s->K, {bits, o.group}, s->name);
        const double fwd =
            flop /
            best_seconds(
                [&] { quant_linear_forward(x.data(), M, s->K, q.view(), y.data(), false); }, 3);
        const double dgrad =
            flop /
            best_seconds(
                [&] { quant_linear_input_grad(x.data(), M, s->N, q.view(), y.data(), false); }, 3);
        std::printf("  %9.1f %6.1f", fwd / 1e9, dgrad / 1e9);
        if (int8 && !quant_int8_supported(q.view()))
          std::printf(" %6s", "-");  // widths the int8 kernels do not take
        else if (int8)
          std::printf(" %6.1f", flop /
                                    best_seconds(
                                        [&] {
                                          quant_linear_forward_int8(x.data(), M, s->K, q.view(),
                                                                    y.data(), false);
                                        },
                                        3) /
                                    1e9);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }

  std::printf("\n# error against fp64 (dequantized weights exact in fp64)\n");
  for (int bits : o.bits) error_report(o, bits);
  set_quant_kernel(default_kernel);
  set_max_threads(0);
  return 0;
}
