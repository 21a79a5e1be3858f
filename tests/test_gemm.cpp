// GEMM kernels against a plain double-precision triple loop, on odd shapes (Weight storage itself:
// test_weight.cpp).
#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "autograd/kernels/gemm.h"
#include "autograd/kernels/gemm_internal.h"
#include "autograd/weight.h"
#include "base/check.h"
#include "base/parallel.h"
#include "tests/support/random_values.h"

namespace glm4 {
namespace {

using testing::random_vec;

// C = alpha op(A) op(B) + beta C in double; also returns per element the magnitude
// sum |alpha a b| + |beta c| that bounds the rounding error.
void reference_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const float* A,
                    int64_t lda, const float* B, int64_t ldb, double beta, const float* C0,
                    int64_t ldc, std::vector<double>* C, std::vector<double>* scale) {
  C->assign(size_t(M * N), 0.0);
  scale->assign(size_t(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        double a = ta ? A[k * lda + i] : A[i * lda + k];
        double b = tb ? B[j * ldb + k] : B[k * ldb + j];
        s += a * b;
        mag += std::fabs(a * b);
      }
      double c0 = beta == 0.0 ? 0.0 : beta * C0[i * ldc + j];
      (*C)[size_t(i * N + j)] = alpha * s + c0;
      (*scale)[size_t(i * N + j)] = std::fabs(alpha) * mag + std::fabs(c0);
    }
}

// Every element within the rigorous bound of a K-term fp32 sum: (K + 4) u * magnitude.
void expect_close(const std::vector<double>& ref, const std::vector<double>& scale, const float* C,
                  int64_t M, int64_t N, int64_t ldc, int64_t K, const std::string& what) {
  const double u = std::numeric_limits<float>::epsilon() / 2;
  int bad = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double r = ref[size_t(i * N + j)], got = C[i * ldc + j];
      double tol = double(K + 4) * u * scale[size_t(i * N + j)] + 1e-30;
      if (!(std::fabs(got - r) <= tol) && bad++ < 5)
        ADD_FAILURE() << what << " at (" << i << ", " << j << "): got " << got << " want " << r
                      << " tol " << tol;
    }
}

std::string shape_name(int64_t M, int64_t N, int64_t K) {
  return str_cat("M=", M, " N=", N, " K=", K);
}

const int64_t kMs[] = {1, 3, 6, 16, 17, 130};
const int64_t kNs[] = {1, 5, 33, 300};
const int64_t kKs[] = {1, 7, 65, 520};

// C = 0.7 op(A) op(B) + beta C through `kernel` (sgemm's signature) on padded leading
// dimensions, against reference_gemm; the padding between C's rows is never written.
template <typename Kernel>
void check_against_reference(const char* name, Kernel kernel, bool ta, bool tb, int64_t M,
                             int64_t N, int64_t K, float beta, uint32_t seed) {
  const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 5;
  auto A = random_vec((ta ? K : M) * lda, seed);
  auto B = random_vec((tb ? N : K) * ldb, seed + 1);
  const auto C0 = random_vec(M * ldc, seed + 2);
  auto C = C0;
  if (beta == 0.0f) C[0] = std::numeric_limits<float>::quiet_NaN();  // overwritten
  std::vector<double> ref, scale;
  reference_gemm(ta, tb, M, N, K, 0.7, A.data(), lda, B.data(), ldb, beta, C.data(), ldc, &ref,
                 &scale);
  kernel(ta, tb, M, N, K, 0.7f, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  const std::string what =
      str_cat(name, " ta=", ta, " tb=", tb, " beta=", beta, " ", shape_name(M, N, K));
  expect_close(ref, scale, C.data(), M, N, ldc, K, what);
  EXPECT_EQ(C[size_t(N)], C0[size_t(N)]) << what << ": wrote into the padding after row 0";
}

TEST(Gemm, SgemmAllTransposesMatchReference) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t M : {int64_t{1}, int64_t{17}, int64_t{300}})
        for (int64_t N : {int64_t{1}, int64_t{33}, int64_t{300}})
          for (int64_t K : {int64_t{1}, int64_t{65}, int64_t{520}})
            for (float beta : {0.0f, 1.3f})
              check_against_reference("sgemm", sgemm, ta, tb, M, N, K, beta, 1);
}

// The Eigen tile kernel directly: the driver uses it or OpenBLAS depending on the machine, so
// this covers it wherever the tests run.
TEST(Gemm, EigenTileKernelAllTransposesMatchReference) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t M : {int64_t{1}, int64_t{17}})
        for (int64_t N : {int64_t{1}, int64_t{33}})
          for (int64_t K : {int64_t{1}, int64_t{65}})
            for (float beta : {0.0f, 1.0f, 1.3f})
              check_against_reference("eigen_sgemm", gemm_detail::eigen_sgemm, ta, tb, M, N, K,
                                      beta, 4);
}

TEST(Gemm, SgemmWithEmptyReductionScalesC) {
  std::vector<float> C = {1, 2, 3, 4, 5, 6};
  float dummy = 0;
  sgemm(false, false, 2, 3, 0, 1.0f, &dummy, 1, &dummy, 3, 2.0f, C.data(), 3);
  EXPECT_EQ(C, (std::vector<float>{2, 4, 6, 8, 10, 12}));
  sgemm(false, false, 2, 3, 0, 1.0f, &dummy, 1, &dummy, 3, 0.0f, C.data(), 3);
  EXPECT_EQ(C, (std::vector<float>(6, 0.0f)));
}

TEST(Gemm, SgemmRejectsBadStrides) {
  std::vector<float> A(12), B(12), C(12);
  EXPECT_THROW(sgemm(false, false, 3, 4, 4, 1, A.data(), 3, B.data(), 4, 0, C.data(), 4), Error);
  EXPECT_THROW(sgemm(false, true, 3, 4, 4, 1, A.data(), 4, B.data(), 3, 0, C.data(), 4), Error);
  EXPECT_THROW(sgemm(false, false, 3, 4, 4, 1, A.data(), 4, B.data(), 4, 0, C.data(), 3), Error);
  EXPECT_THROW(sgemm(false, false, -1, 4, 4, 1, A.data(), 4, B.data(), 4, 0, C.data(), 4), Error);
}

// Runs linear_forward and linear_input_grad for every shape, dtype and accumulate flag against
// the double loop on the widened weights.
TEST(Gemm, LinearProductsMatchReference) {
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (int64_t M : kMs)
      for (int64_t N : kNs)
        for (int64_t K : kKs)
          for (bool acc : {false, true}) {
            auto w32 = random_vec(N * K, 11);
            Weight W = Weight::from_f32(w32.data(), N, K, dt);
            std::vector<float> wide(size_t(N * K));
            W.to_f32(wide.data());
            const std::string name =
                str_cat(dtype_name(dt), " acc=", acc, " ", shape_name(M, N, K));
            std::vector<double> ref, scale;

            auto X = random_vec(M * K, 12);
            auto Y = random_vec(M * N, 13);
            reference_gemm(false, true, M, N, K, 1.0, X.data(), K, wide.data(), K, acc ? 1.0 : 0.0,
                           Y.data(), N, &ref, &scale);
            linear_forward(X.data(), M, K, W, Y.data(), acc, kF32Compute);
            expect_close(ref, scale, Y.data(), M, N, N, K, "linear_forward " + name);

            auto dY = random_vec(M * N, 14);
            auto dX = random_vec(M * K, 15);
            reference_gemm(false, false, M, K, N, 1.0, dY.data(), N, wide.data(), K,
                           acc ? 1.0 : 0.0, dX.data(), K, &ref, &scale);
            linear_input_grad(dY.data(), M, N, W, dX.data(), acc, kF32Compute);
            expect_close(ref, scale, dX.data(), M, K, K, N, "linear_input_grad " + name);
          }
}

// A batch of decode rows (several sequences, one token each) reads the weights once, and each
// row comes out bit for bit as when it is alone: continuous batching cannot change greedy ids.
TEST(Gemm, DecodeRowsEqualThemselvesAloneForEveryBatchUpToSixteen) {
  const int64_t N = 77, K = 300;
  for (DType dt : {DType::F32, DType::BF16}) {
    auto w32 = random_vec(N * K, 21);
    Weight W = Weight::from_f32(w32.data(), N, K, dt);
    auto X = random_vec(16 * K, 22);
    std::vector<float> alone(size_t(16 * N));
    for (int64_t m = 0; m < 16; ++m)
      linear_forward(X.data() + m * K, 1, K, W, alone.data() + m * N, false, kF32Compute);
    for (int64_t M = 2; M <= 16; ++M) {
      std::vector<float> Y(size_t(M * N));
      linear_forward(X.data(), M, K, W, Y.data(), false, kF32Compute);
      for (int64_t i = 0; i < M * N; ++i)
        ASSERT_EQ(Y[size_t(i)], alone[size_t(i)]) << dtype_name(dt) << " M=" << M << " at " << i;
    }
  }
}

TEST(Gemm, LinearWeightGradMatchesReference) {
  for (int64_t M : kMs)
    for (int64_t N : kNs)
      for (int64_t K : kKs)
        for (bool acc : {false, true}) {
          auto dY = random_vec(M * N, 21), X = random_vec(M * K, 22), dW = random_vec(N * K, 23);
          std::vector<double> ref, scale;
          reference_gemm(true, false, N, K, M, 1.0, dY.data(), N, X.data(), K, acc ? 1.0 : 0.0,
                         dW.data(), K, &ref, &scale);
          linear_weight_grad(dY.data(), X.data(), M, N, K, dW.data(), acc);
          expect_close(ref, scale, dW.data(), N, K, K, M,
                       str_cat("linear_weight_grad acc=", acc, " ", shape_name(M, N, K)));
        }
}

// A bf16 / f16 weight gives the f32 result of its widened copy (same blocking, same order).
TEST(Gemm, StoredDtypesEqualF32PathOnWidenedWeights) {
  for (DType dt : {DType::BF16, DType::F16})
    for (int64_t M : {int64_t{1}, int64_t{3}, int64_t{130}})
      for (auto [N, K] : {std::pair<int64_t, int64_t>{300, 1100}, {1000, 777}, {5, 1}}) {
        auto w32 = random_vec(N * K, 31);
        Weight W = Weight::from_f32(w32.data(), N, K, dt);
        std::vector<float> wide(size_t(N * K));
        W.to_f32(wide.data());
        Weight W32 = Weight::from_f32(wide.data(), N, K);
        auto X = random_vec(M * K, 32), dY = random_vec(M * N, 33);
        std::vector<float> y(size_t(M * N)), y32(y.size()), dx(size_t(M * K)), dx32(dx.size());
        linear_forward(X.data(), M, K, W, y.data(), false, kF32Compute);
        linear_forward(X.data(), M, K, W32, y32.data(), false, kF32Compute);
        linear_input_grad(dY.data(), M, N, W, dx.data(), false, kF32Compute);
        linear_input_grad(dY.data(), M, N, W32, dx32.data(), false, kF32Compute);
        auto max_rel = [](const std::vector<float>& a, const std::vector<float>& b) {
          double big = 0, diff = 0;
          for (size_t i = 0; i < a.size(); ++i) {
            big = std::max(big, double(std::fabs(b[i])));
            diff = std::max(diff, double(std::fabs(a[i] - b[i])));
          }
          return diff / std::max(big, 1e-30);
        };
        EXPECT_LE(max_rel(y, y32), 1e-6) << dtype_name(dt) << " forward " << shape_name(M, N, K);
        EXPECT_LE(max_rel(dx, dx32), 1e-6)
            << dtype_name(dt) << " input grad " << shape_name(M, N, K);
      }
}

TEST(Gemm, ResultsDoNotDependOnThreadCount) {
  const int64_t M = 130, N = 700, K = 600;
  auto X = random_vec(M * K, 41), w = random_vec(N * K, 42);
  Weight W = Weight::from_f32(w.data(), N, K, DType::BF16);
  std::vector<float> y1(size_t(M * N)), y2(y1.size()), d1(static_cast<size_t>(K)), d2(d1.size());
  set_max_threads(1);
  linear_forward(X.data(), M, K, W, y1.data(), false, kF32Compute);
  linear_input_grad(X.data(), 1, N, W, d1.data(), false, kF32Compute);
  set_max_threads(2);
  linear_forward(X.data(), M, K, W, y2.data(), false, kF32Compute);
  linear_input_grad(X.data(), 1, N, W, d2.data(), false, kF32Compute);
  set_max_threads(0);
  EXPECT_EQ(y1, y2);
  EXPECT_EQ(d1, d2);
}

TEST(Gemm, LinearRejectsMismatchedShapes) {
  auto w = random_vec(12, 1);
  Weight W = Weight::from_f32(w.data(), 3, 4);
  std::vector<float> x(20), y(20);
  EXPECT_THROW(linear_forward(x.data(), 2, 5, W, y.data(), false, kF32Compute), Error);
  EXPECT_THROW(linear_input_grad(x.data(), 2, 4, W, y.data(), false, kF32Compute), Error);
}

TEST(Gemm, OpenBlasRunsSingleThreadedUnderTbb) {
  init_blas();
  EXPECT_EQ(openblas_get_num_threads(), 1);
  EXPECT_NE(blas_core_name(), nullptr);
}

// An Emerald Rapids guest made Debian's OpenBLAS fall back to Prescott (SSE3) kernels, 4.7x
// slower sgemm; any AVX-512 CPU must end up on an AVX-512 kernel family.
TEST(Gemm, OpenBlasRunsAvx512KernelsOnAnAvx512Cpu) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) GTEST_SKIP() << "OPENBLAS_CORETYPE is set";
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  if (!avx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  init_blas();
  const std::string core = blas_core_name();
  EXPECT_TRUE(core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids") << core;
}

}  // namespace
}  // namespace glm4
