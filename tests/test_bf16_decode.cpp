// The AVX512-BF16 decode forward (1-8 rows of X streaming W once, bf16_internal.h) on odd shapes:
// against a double-precision product of the bf16-rounded operands, on 1 and 2 threads; its
// row-range form over any split of the rows against the whole product, and each row of X
// against that row alone, to the bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "autograd/kernels/bf16_gemm.h"
#include "autograd/kernels/bf16_internal.h"
#include "base/check.h"
#include "base/dtype.h"
#include "base/parallel.h"
#include "tests/support/random_values.h"

namespace glm4 {
namespace {

using testing::random_bf16;
using testing::random_vec;

using kernels::Bf16Kernel;
namespace bf16 = kernels::bf16;

const double kU = std::numeric_limits<float>::epsilon() / 2;  // fp32 unit roundoff

// N and K not multiples of a row block (8) or a k-block (32); K below, at and across k-blocks.
const std::pair<int64_t, int64_t> kShapes[] = {{1, 1},   {7, 31},     {13, 33},   {37, 77},
                                               {45, 64}, {100, 1000}, {129, 520}, {23, 2049}};

bool available() { return kernels::bf16_kernel_available(Bf16Kernel::kAvx512Bf16); }

// Y[M, N] = X W^T through bf16_linear_forward on `threads` threads.
std::vector<float> forward(const std::vector<float>& X, int64_t M, int64_t K,
                           const std::vector<uint16_t>& W, int64_t N, int threads) {
  std::vector<float> Y(size_t(M * N), -7.0f);
  set_max_threads(threads);
  kernels::bf16_linear_forward(Bf16Kernel::kAvx512Bf16, X.data(), M, K, W.data(), N, Y.data(),
                               false);
  set_max_threads(0);
  return Y;
}

TEST(Bf16Decode, MatchesDoubleReferenceOnOneAndTwoThreads) {
  if (!available()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  for (int64_t M = 1; M <= bf16::kDecodeRows; ++M)
    for (auto [N, K] : kShapes) {
      const auto X = random_vec(M * K, uint32_t(M * 31 + K));
      const auto W = random_bf16(N * K, uint32_t(N));
      const std::vector<float> one = forward(X, M, K, W, N, 1);
      const std::vector<float> two = forward(X, M, K, W, N, 2);
      const std::string what = str_cat("M=", M, " N=", N, " K=", K);
      EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0)
          << what << ": 1 and 2 threads differ";
      int bad = 0;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double s = 0, mag = 0;
          for (int64_t k = 0; k < K; ++k) {
            const double x = bf16_to_f32(f32_to_bf16(X[size_t(m * K + k)]));
            const double p = x * double(bf16_to_f32(W[size_t(n * K + k)]));
            s += p;
            mag += std::fabs(p);
          }
          const double got = one[size_t(m * N + n)];
          if (!(std::fabs(got - s) <= double(K + 4) * kU * mag + 1e-30) && bad++ < 5)
            ADD_FAILURE() << what << " at (" << m << ", " << n << "): got " << got << " want " << s;
        }
    }
}

// avx512_small_forward over [0, a), [a, b), [b, N) for splits that cut row blocks anywhere,
// with and without accumulation, gives the bits of one call over [0, N).
TEST(Bf16Decode, RowRangesGiveTheWholeProductsBits) {
  if (!available()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  for (int64_t M : {1, 2, 3, 5, 8})
    for (auto [N, K] : kShapes) {
      const auto X = random_vec(M * K, uint32_t(M + 5 * K));
      const auto W = random_bf16(N * K, uint32_t(N + 1));
      std::vector<uint16_t> xb(size_t(M * bf16::kblocks(K) * bf16::kKBlock));
      bf16::round_rows_bf16(X.data(), M, K, xb.data());
      for (bool accumulate : {false, true}) {
        const std::vector<float> start = random_vec(M * N, 9);
        std::vector<float> whole = start;
        bf16::avx512_small_forward(xb.data(), M, K, W.data(), N, 0, N, whole.data(), accumulate);
        for (int64_t a : {int64_t{1}, N / 3, N - 1}) {
          const int64_t b = std::min(N, a + 11);
          std::vector<float> parts = start;
          for (auto [n0, n1] : {std::pair{b, N}, std::pair{int64_t{0}, a}, std::pair{a, b}})
            bf16::avx512_small_forward(xb.data(), M, K, W.data(), N, n0, n1, parts.data(),
                                       accumulate);
          EXPECT_EQ(std::memcmp(parts.data(), whole.data(), whole.size() * sizeof(float)), 0)
              << "M=" << M << " N=" << N << " K=" << K << " split " << a << ", " << b
              << " accumulate " << accumulate;
        }
      }
    }
}

// A row of an M-row product has the bits of that row's product alone: a decode step's tokens do
// not change with the other sequences of a serve batch.
TEST(Bf16Decode, EachRowEqualsItsProductAlone) {
  if (!available()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  for (auto [N, K] : kShapes) {
    const int64_t M = bf16::kDecodeRows;
    const auto X = random_vec(M * K, uint32_t(K + 3));
    const auto W = random_bf16(N * K, uint32_t(N + 2));
    for (int64_t rows = 1; rows <= M; ++rows) {
      const std::vector<float> Xr(X.begin(), X.begin() + rows * K);
      const std::vector<float> Y = forward(Xr, rows, K, W, N, 2);
      for (int64_t m = 0; m < rows; ++m) {
        const std::vector<float> x(X.begin() + m * K, X.begin() + (m + 1) * K);
        const std::vector<float> alone = forward(x, 1, K, W, N, 2);
        EXPECT_EQ(std::memcmp(alone.data(), Y.data() + m * N, size_t(N) * sizeof(float)), 0)
            << "row " << m << " of " << rows << ", N=" << N << " K=" << K;
      }
    }
  }
}

}  // namespace
}  // namespace glm4
