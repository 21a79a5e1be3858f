// GFLOP/s of the linear-layer products (autograd/kernels/gemm.h) on GLM-4 shapes, f32 and bf16
// weights, forward (X W^T) and input gradient (dY W), next to the best plain fp32 sgemm on the same
// shape: OpenBLAS single-threaded per TBB panel, OpenBLAS's own threads, and Eigen per TBB panel.
// Usage: bench_gemm [--big] [--threads 1,2] [--dtypes f32,bf16,f16] [--ops fwd,dgrad]
//                   [--shapes small|large|all] [--min-time S] [--reps N]
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // Eigen's AVX-512 headers under GCC 12
#include <cblas.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "autograd/kernels/gemm.h"
#include "autograd/weight.h"
#include "base/dtype.h"
#include "base/parallel.h"
#include "benchmarks/bench_flags.h"

using namespace glm4;

namespace {

struct Shape {
  const char* group;  // "large" (GLM-4-9B) or "small" (the 1024-hidden mid config)
  int64_t M, K, N;    // X [M, K], W [N, K]: Y [M, N]
  bool big;           // only with --big
};

const Shape kShapes[] = {
    {"large", 512, 4096, 4096, false},  {"large", 512, 4096, 27392, true},
    {"large", 512, 13696, 4096, false}, {"small", 512, 1024, 1024, false},
    {"small", 512, 1024, 5632, false},  {"small", 512, 2816, 1024, false},
    {"small", 512, 1024, 32000, false},
};

struct Options {
  bool big = false;
  std::vector<int> threads{1, 2};
  std::vector<std::string> dtypes{"f32", "bf16"};
  std::vector<std::string> ops{"fwd", "dgrad"};
  std::string shapes = "all";
  double min_time = 1.0;
  int reps = 3;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&] { return bench::flag_value(argc, argv, i); };
    if (a == "--big")
      o.big = true;
    else if (a == "--threads") {
      o.threads.clear();
      for (auto& t : split_commas(value())) o.threads.push_back(std::stoi(t));
    } else if (a == "--dtypes")
      o.dtypes = split_commas(value());
    else if (a == "--ops")
      o.ops = split_commas(value());
    else if (a == "--shapes")
      o.shapes = value();
    else if (a == "--min-time")
      o.min_time = std::stod(value());
    else if (a == "--reps")
      o.reps = std::stoi(value());
    else {
      std::fprintf(stderr, "unknown flag %s (see the header of bench_gemm.cpp)\n", a.c_str());
      std::exit(2);
    }
  }
  return o;
}

// Best wall time of fn() over at least `reps` runs and `min_time` seconds, after one warm-up.
template <typename Fn>
double best_seconds(Fn&& fn, const Options& o) {
  fn();
  double best = 1e30, total = 0;
  for (int n = 0; n < o.reps || total < o.min_time; ++n) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
  }
  return best;
}

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using CMap = Eigen::Map<const RowMat>;
using MMap = Eigen::Map<RowMat>;

// One product C[M, Nc] = A[M, Kr] op(W), with W the [N, K] weight: forward is A = X, op = W^T
// (Nc = N, Kr = K); the input gradient is A = dY, op = W (Nc = K, Kr = N).
struct Product {
  bool fwd;
  int64_t M, N, K;  // the weight's N and K
  const float* A;
  const float* W;
  float* C;
  int64_t cols() const { return fwd ? N : K; }
  int64_t red() const { return fwd ? K : N; }

  // Output columns [c0, c1) with one single-threaded cblas_sgemm.
  void blas_panel(int64_t c0, int64_t c1) const {
    if (fwd)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), int(c1 - c0), int(K), 1.0f, A,
                  int(K), W + c0 * K, int(K), 0.0f, C + c0, int(N));
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(M), int(c1 - c0), int(N), 1.0f, A,
                  int(N), W + c0, int(K), 0.0f, C + c0, int(K));
  }
  void eigen_panel(int64_t c0, int64_t c1) const {
    CMap a(A, M, red()), w(W, N, K);
    MMap c(C, M, cols());
    if (fwd)
      c.middleCols(c0, c1 - c0).noalias() = a * w.middleRows(c0, c1 - c0).transpose();
    else
      c.middleCols(c0, c1 - c0).noalias() = a * w.middleCols(c0, c1 - c0);
  }
};

// Output columns cut into `threads` equal panels (multiples of 16), one TBB task each.
template <typename Fn>
void panels(int64_t cols, int threads, Fn&& fn) {
  const int64_t width = std::min(cols, (cols / threads + 15) / 16 * 16);
  const int64_t n = (cols + width - 1) / width;
  parallel_for(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) fn(p * width, std::min(cols, (p + 1) * width));
  });
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& ref) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, double(std::abs(a[i] - ref[i])));
    scale = std::max(scale, double(std::abs(ref[i])));
  }
  return diff / scale;
}

void fill_random(std::vector<float>& v, uint64_t seed, bool bf16_exact) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : v) x = bf16_exact ? bf16_to_f32(f32_to_bf16(normal(rng))) : normal(rng);
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  init_blas();
  std::printf(
      "# bench_gemm: GFLOP/s = 2*M*N*K / best time of >= %d runs (>= %.1f s); OpenBLAS %s\n",
      o.reps, o.min_time, blas_core_name());
  std::printf(
      "# glm4 = linear_forward / linear_input_grad; blas-tiles = 1-thread cblas_sgemm per TBB "
      "panel; blas-mt = OpenBLAS threads; eigen = Eigen per TBB panel; ratio = glm4 / best\n");
  std::printf("%-22s %-5s %3s %-5s %7s %10s %8s %7s %7s %6s %7s %8s\n", "shape MxK.KxN", "op",
              "thr", "dtype", "glm4", "blas-tiles", "blas-mt", "eigen", "best", "ratio", "target",
              "rel.err");
  for (const Shape& s : kShapes) {
    if (s.big && !o.big) continue;
    if (o.shapes != "all" && o.shapes != s.group) continue;
    std::vector<float> w(size_t(s.N * s.K)), x(size_t(s.M * std::max(s.K, s.N)));
    fill_random(w, 1, true);  // bf16-exact, so every dtype holds the same matrix
    fill_random(x, 2, false);
    std::vector<Weight> weights;
    for (const std::string& d : o.dtypes) {
      DType dt;
      if (!parse_dtype(d, &dt)) {
        std::fprintf(stderr, "unknown dtype %s\n", d.c_str());
        return 2;
      }
      weights.push_back(Weight::from_f32(w.data(), s.N, s.K, dt));
    }
    char shape[64];
    std::snprintf(shape, sizeof shape, "%ldx%ld.%ldx%ld", long(s.M), long(s.K), long(s.K),
                  long(s.N));
    for (const std::string& op : o.ops) {
      const bool fwd = op == "fwd";
      const int64_t cols = fwd ? s.N : s.K;
      std::vector<float> ref(size_t(s.M * cols)), out(ref.size());
      Product p{fwd, s.M, s.N, s.K, x.data(), w.data(), ref.data()};
      const double flop = 2.0 * double(s.M) * double(s.N) * double(s.K);
      for (int t : o.threads) {
        set_max_threads(t);
        double tiles =
            flop /
            best_seconds(
                [&] { panels(cols, t, [&](int64_t a, int64_t b) { p.blas_panel(a, b); }); }, o);
        double eigen =
            flop /
            best_seconds(
                [&] { panels(cols, t, [&](int64_t a, int64_t b) { p.eigen_panel(a, b); }); }, o);
        openblas_set_num_threads(t);
        double mt = flop / best_seconds([&] { p.blas_panel(0, cols); }, o);
        openblas_set_num_threads(1);  // ref now holds OpenBLAS's own result
        const double best = std::max({tiles, mt, eigen});
        for (size_t i = 0; i < weights.size(); ++i) {
          const Weight& W = weights[i];
          double sec = best_seconds(
              [&] {
                if (fwd)
                  linear_forward(x.data(), s.M, s.K, W, out.data(), false, kF32Compute);
                else
                  linear_input_grad(x.data(), s.M, s.N, W, out.data(), false, kF32Compute);
              },
              o);
          const double rate = flop / sec, target = W.dtype() == DType::F32 ? 0.9 : 0.8;
          std::printf(
              "%-22s %-5s %3d %-5s %7.1f %10.1f %8.1f %7.1f %7.1f %5.0f%% %6.0f%%%s %8.1e\n", shape,
              op.c_str(), t, o.dtypes[i].c_str(), rate / 1e9, tiles / 1e9, mt / 1e9, eigen / 1e9,
              best / 1e9, 100 * rate / best, 100 * target, rate >= target * best ? " " : "!",
              rel_diff(out, ref));
          std::fflush(stdout);
        }
      }
    }
  }
  set_max_threads(0);
  return 0;
}
