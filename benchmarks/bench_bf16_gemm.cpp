// GFLOP/s of the bf16 linear kernels (every variant this CPU has) side by side with oneDNN's bare
// bf16 matmul (bf16 activations already converted, plain row-major bf16 weights, and with
// weights pre-packed in its own layout; when built with libdnnl-dev) and today's fp32 path on
// the same bf16 weights, on GLM-4 linear shapes, forward (X W^T) and input gradient (dY W).
// Decode rows (M <= 8: one sequence's step up to a serve batch's) read cold weights from a pool
// larger than the caches, in 2 MB pages as loaded weights are, and print GB/s of weight read
// next to the bandwidth probe (bandwidth_probe.h) on the same threads.
// Shapes: mid and 9b (dense GLM-4 at hidden 1024 and GLM-4-9B), moe (an expert of
// configs/moe-mid.json) and flash (an expert of GLM-4.7-Flash).
// Usage: bench_bf16_gemm [--shapes mid,9b,moe,flash] [--m 1,4,512,2048] [--threads 2] [--ops
// fwd,dgrad]
//                        [--reps 3] [--min-time 0.3] [--probe-gib 2] [--pool-gib 1]
//                        [--clock wall|cpu]
// --clock cpu divides the process CPU time by the thread count instead of reading the wall
// clock: on a machine shared with other jobs it measures what the code does while it runs
// (spinning threads count against it), where the wall clock measures the neighbours too.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "autograd/compute_dtype.h"
#include "autograd/kernels/bf16_gemm.h"
#include "autograd/kernels/cpu_features.h"
#include "autograd/kernels/gemm.h"
#include "autograd/weight.h"
#include "base/dtype.h"
#include "base/memory.h"
#include "base/parallel.h"
#include "benchmarks/bandwidth_probe.h"
#include "benchmarks/bench_flags.h"

#ifdef GLM4_HAVE_DNNL
#include <omp.h>

#include <dnnl.hpp>
#endif

using namespace glm4;
using kernels::Bf16Kernel;

namespace {

struct Shape {
  const char* group;  // "mid" (hidden 1024), "9b" (GLM-4-9B), "moe" or "flash" (one expert)
  const char* name;
  int64_t K, N;  // W [N, K]
};

const Shape kShapes[] = {
    {"mid", "q_o", 1024, 1024},    {"mid", "kv", 1024, 128},        {"mid", "gate_up", 1024, 5632},
    {"mid", "down", 2816, 1024},   {"mid", "lm_head", 1024, 32000}, {"9b", "q_o", 4096, 4096},
    {"9b", "kv", 4096, 512},       {"9b", "gate_up", 4096, 27392},  {"9b", "down", 13696, 4096},
    {"moe", "gate", 1024, 512},    {"moe", "down", 512, 1024},      {"flash", "gate", 2048, 1536},
    {"flash", "down", 1536, 2048},
};

constexpr int64_t kDecodeRows = 8;  // up to this M the products stream W (GB/s, cold weights)

// Decode rows' cold weights: copies of one weight in 2 MB pages, as load_model holds weights.
class WeightPool {
 public:
  WeightPool() = default;
  WeightPool(const WeightPool&) = delete;
  WeightPool& operator=(const WeightPool&) = delete;
  ~WeightPool() { release(); }
  // `copies` copies of w[n] for `shape`, the pool's memory reused when the size is the same.
  void fill(const void* shape, const uint16_t* w, int64_t n, int64_t copies) {
    const size_t bytes = size_t(n * copies) * sizeof(uint16_t);
    if (bytes != bytes_) {
      release();
      data_ = static_cast<uint16_t*>(map_anonymous(bytes, "bench_bf16_gemm weight pool"));
      bytes_ = bytes;
    }
    for (int64_t c = 0; c < copies; ++c) std::memcpy(data_ + c * n, w, size_t(n) * 2);
    shape_ = shape;
    n_ = n;
    copies_ = copies;
  }
  bool holds(const void* shape) const { return data_ != nullptr && shape_ == shape; }
  const uint16_t* copy(int64_t c) const { return data_ + (c % copies_) * n_; }
  int64_t copies() const { return copies_; }

 private:
  void release() {
    if (data_ != nullptr) unmap_anonymous(data_, bytes_);
    data_ = nullptr;
    bytes_ = 0;
  }
  const void* shape_ = nullptr;
  uint16_t* data_ = nullptr;
  size_t bytes_ = 0;
  int64_t n_ = 0, copies_ = 0;
};

struct Options {
  std::vector<std::string> shapes{"mid", "9b"};
  std::vector<int64_t> ms{1, 4, 512, 2048};
  std::vector<int> threads{2};
  std::vector<std::string> ops{"fwd", "dgrad"};
  int reps = 3;
  double min_time = 0.3;
  double probe_gib = 2.0;
  double pool_gib = 1.0;
  bool cpu_clock = false;
  int threads_now = 1;  // the divisor for --clock cpu
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return bench::flag_value(argc, argv, i); };
    if (a == "--shapes")
      o.shapes = bench::split_commas(value());
    else if (a == "--m") {
      o.ms.clear();
      for (auto& m : bench::split_commas(value())) o.ms.push_back(std::stoll(m));
    } else if (a == "--threads") {
      o.threads.clear();
      for (auto& t : bench::split_commas(value())) o.threads.push_back(std::stoi(t));
    } else if (a == "--ops")
      o.ops = bench::split_commas(value());
    else if (a == "--reps")
      o.reps = std::stoi(value());
    else if (a == "--min-time")
      o.min_time = std::stod(value());
    else if (a == "--probe-gib")
      o.probe_gib = std::stod(value());
    else if (a == "--pool-gib")
      o.pool_gib = std::stod(value());
    else if (a == "--clock")
      o.cpu_clock = value() == "cpu";
    else {
      std::fprintf(stderr, "unknown flag %s (see the header of bench_bf16_gemm.cpp)\n", a.c_str());
      std::exit(2);
    }
  }
  return o;
}

double now(const Options& o) {
  if (!o.cpu_clock)
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec)) / o.threads_now;
}

// Best time of fn() over at least `reps` runs and `min_time` seconds, after one warm-up.
template <typename Fn>
double best_seconds(Fn&& fn, const Options& o) {
  fn();
  double best = 1e30, total = 0;
  for (int n = 0; n < o.reps || total < o.min_time; ++n) {
    const double t0 = now(o);
    fn();
    const double s = now(o) - t0;
    best = std::min(best, s);
    total += s;
  }
  return best;
}

std::vector<float> random_vec(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

#ifdef GLM4_HAVE_DNNL
// oneDNN bf16 matmul C[M, out] = A[M, red] op(W) with the weight plain (strides of W[N, K]) or
// reordered once into the layout oneDNN prefers ("packed"). Runs on OpenMP: called outside TBB.
class DnnlMatmul {
 public:
  DnnlMatmul(bool fwd, int64_t M, int64_t N, int64_t K, bool packed, const uint16_t* w)
      : eng_(dnnl::engine::kind::cpu, 0), stream_(eng_) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const int64_t red = fwd ? K : N, out = fwd ? N : K;
    const dnnl::memory::desc src({M, red}, dt::bf16, tag::ab);
    const dnnl::memory::desc plain = fwd ? dnnl::memory::desc({K, N}, dt::bf16, tag::ba)
                                         : dnnl::memory::desc({N, K}, dt::bf16, tag::ab);
    const dnnl::memory::desc wei =
        packed ? dnnl::memory::desc({red, out}, dt::bf16, tag::any) : plain;
    const dnnl::memory::desc dst({M, out}, dt::f32, tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), eng_);
    impl_ = pd.impl_info_str();
    prim_ = dnnl::matmul(pd);
    src_ = dnnl::memory(src, eng_, DNNL_MEMORY_NONE);
    dst_ = dnnl::memory(dst, eng_, DNNL_MEMORY_NONE);
    plain_ = dnnl::memory(plain, eng_, const_cast<uint16_t*>(w));
    if (packed) {
      wei_ = dnnl::memory(pd.weights_desc(), eng_);
      dnnl::reorder(plain_, wei_).execute(stream_, plain_, wei_);
      stream_.wait();
    } else {
      wei_ = plain_;
    }
  }
  void set_weight(const uint16_t* w) { wei_.set_data_handle(const_cast<uint16_t*>(w)); }
  void run(const uint16_t* a, float* c) {
    src_.set_data_handle(const_cast<uint16_t*>(a));
    dst_.set_data_handle(c);
    prim_.execute(stream_, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, wei_}, {DNNL_ARG_DST, dst_}});
    stream_.wait();
  }
  const std::string& impl() const { return impl_; }

 private:
  dnnl::engine eng_;
  dnnl::stream stream_;
  dnnl::matmul prim_;
  dnnl::memory src_, dst_, plain_, wei_;
  std::string impl_;
};
#endif

// One table row: a value per column name; columns without a value print "-".
struct Row {
  std::vector<std::pair<std::string, std::string>> cells;
  void add(const std::string& name, double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", v);
    cells.emplace_back(name, buf);
  }
  void add_text(const std::string& name, const std::string& v) { cells.emplace_back(name, v); }
  std::string get(const std::string& name) const {
    for (const auto& [n, v] : cells)
      if (n == name) return v;
    return "-";
  }
};

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  std::vector<Bf16Kernel> variants;
  for (Bf16Kernel k : {Bf16Kernel::kAmx, Bf16Kernel::kAvx512Bf16})
    if (kernels::bf16_kernel_available(k)) variants.push_back(k);
  std::printf("# bench_bf16_gemm: best time of >= %d runs (>= %.1f s); bf16 kernels here:", o.reps,
              o.min_time);
  for (Bf16Kernel k : variants) std::printf(" %s", kernels::bf16_kernel_name(k));
  std::printf("%s\n", variants.empty() ? " none" : "");
  std::printf("# clock: %s\n", o.cpu_clock ? "process CPU time / threads" : "wall");
  std::printf(
      "# GFLOP/s = 2 M N K / time (M > 8); GB/s = weight bytes / time (M <= 8, cold weights)\n");
  std::printf("# f32 = today's path (bf16 weights widened per tile, fp32 products)\n");
#ifdef GLM4_HAVE_DNNL
  std::printf(
      "# onednn = oneDNN %d.%d bare bf16 matmul (bf16 activations, plain weights); "
      "onednn-pk = weights reordered once to its layout; dnnl-det = 1 and N threads "
      "bit-identical\n",
      DNNL_VERSION_MAJOR, DNNL_VERSION_MINOR);
#else
  std::printf("# oneDNN not linked (install libdnnl-dev and reconfigure)\n");
#endif
  std::vector<double> probe(o.threads.size());
  for (size_t i = 0; i < o.threads.size(); ++i) {
    set_max_threads(o.threads[i]);
    probe[i] = bench::bandwidth_probe_gbs(o.probe_gib, o.reps);
    std::printf("# bandwidth probe: %.1f GiB streamed on %d threads: %.1f GB/s\n", o.probe_gib,
                o.threads[i], probe[i]);
  }
  std::vector<std::string> columns;
  for (Bf16Kernel k : variants) columns.push_back(kernels::bf16_kernel_name(k));
#ifdef GLM4_HAVE_DNNL
  for (const char* n : {"onednn", "onednn-pk", "dnnl-det"}) columns.push_back(n);
#endif
  columns.push_back("f32");
  columns.push_back("probe");
  WeightPool pool;  // cold weights for decode rows
  bool header = false;
  for (const Shape& s : kShapes) {
    if (std::find(o.shapes.begin(), o.shapes.end(), s.group) == o.shapes.end()) continue;
    const int64_t wn = s.N * s.K;
    const auto w32 = random_vec(wn, 1);
    const Weight W = Weight::from_f32(w32.data(), s.N, s.K, DType::BF16);
    const auto* wb = static_cast<const uint16_t*>(W.data());
    const int64_t copies = std::max<int64_t>(2, int64_t(o.pool_gib * (1 << 30)) / (2 * wn));
    for (int64_t M : o.ms) {
      const bool decode = M <= kDecodeRows;
      if (decode && !pool.holds(&s)) pool.fill(&s, wb, wn, copies);
      int64_t next = 0;
      auto weight = [&]() -> const uint16_t* {  // the next cold copy, or the one hot weight
        return decode ? pool.copy(++next) : wb;
      };
      for (const std::string& op : o.ops) {
        const bool fwd = op == "fwd";
        const int64_t red = fwd ? s.K : s.N, out = fwd ? s.N : s.K;
        const auto a = random_vec(M * red, 2);
        std::vector<uint16_t> a16(a.size());
        for (size_t i = 0; i < a.size(); ++i) a16[i] = f32_to_bf16(a[i]);
        std::vector<float> c(static_cast<size_t>(M * out)), c1(c.size());
        for (size_t ti = 0; ti < o.threads.size(); ++ti) {
          const int t = o.threads[ti];
          const double work = decode ? 2.0 * double(wn) : 2.0 * double(M) * double(wn);
          auto rate = [&](double sec) { return work / sec / 1e9; };
          Row row;
          set_max_threads(t);
          o.threads_now = t;
          for (Bf16Kernel k : variants)
            row.add(kernels::bf16_kernel_name(k),
                    rate(best_seconds(
                        [&] {
                          if (fwd)
                            kernels::bf16_linear_forward(k, a.data(), M, s.K, weight(), s.N,
                                                         c.data(), false);
                          else
                            kernels::bf16_linear_input_grad(k, a.data(), M, s.N, weight(), s.K,
                                                            c.data(), false);
                        },
                        o)));
#ifdef GLM4_HAVE_DNNL
          for (bool packed : {false, true}) {
            if (packed && decode) continue;  // one packed copy only: it would be hot
            omp_set_num_threads(t);
            DnnlMatmul mm(fwd, M, s.N, s.K, packed, wb);
            const double sec = best_seconds(
                [&] {
                  if (!packed) mm.set_weight(weight());
                  mm.run(a16.data(), c.data());
                },
                o);
            row.add(packed ? "onednn-pk" : "onednn", rate(sec));
            if (!packed) {  // the same product on one OpenMP thread
              mm.set_weight(wb);
              mm.run(a16.data(), c.data());
              omp_set_num_threads(1);
              DnnlMatmul one(fwd, M, s.N, s.K, false, wb);
              one.run(a16.data(), c1.data());
              row.add_text("dnnl-det",
                           std::memcmp(c.data(), c1.data(), c.size() * 4) == 0 ? "yes" : "NO");
            }
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(200));  // OpenMP workers idle
#endif
          const double f32 = best_seconds(
              [&] {
                const Weight w = Weight::view(DType::BF16, weight(), s.N, s.K, nullptr);
                if (fwd)
                  linear_forward(a.data(), M, s.K, w, c.data(), false, kF32Compute);
                else
                  linear_input_grad(a.data(), M, s.N, w, c.data(), false, kF32Compute);
              },
              o);
          row.add("f32", rate(f32));
          if (decode) row.add("probe", probe[ti]);
          if (!header) {
            std::printf("%-12s %-11s %5s %-5s %3s %-5s", "shape", "KxN", "M", "op", "thr", "unit");
            for (const std::string& n : columns) std::printf(" %10s", n.c_str());
            std::printf("\n");
            header = true;
          }
          char kxn[32];
          std::snprintf(kxn, sizeof kxn, "%ldx%ld", long(s.K), long(s.N));
          std::printf("%-12s %-11s %5ld %-5s %3d %-5s",
                      (std::string(s.group) + "." + s.name).c_str(), kxn, long(M), op.c_str(), t,
                      decode ? "GB/s" : "GF/s");
          for (const std::string& n : columns) std::printf(" %10s", row.get(n).c_str());
          std::printf("\n");
          std::fflush(stdout);
        }
      }
    }
  }
  set_max_threads(0);
  return 0;
}
