// The bf16 kernels (AMX, AVX512-BF16) against a double-precision loop on the bf16-rounded
// operands and against the fp32 product, on odd shapes; thread-count independence; and the
// dispatch in linear_forward / linear_input_grad (compute dtype, forced kernel, fallback).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "autograd/compute_dtype.h"
#include "autograd/kernels/affine_quant.h"
#include "autograd/kernels/bf16_gemm.h"
#include "autograd/kernels/cpu_features.h"
#include "autograd/kernels/gemm.h"
#include "autograd/kernels/gemm_internal.h"
#include "autograd/kernels/quant_linear.h"
#include "autograd/weight.h"
#include "autograd/weight_quantize.h"
#include "base/check.h"
#include "base/dtype.h"
#include "base/parallel.h"
#include "model/compute_choice.h"
#include "tests/support/random_values.h"

namespace glm4 {
namespace {

using testing::random_bf16;
using testing::random_vec;

using kernels::Bf16Kernel;

const double kU = std::numeric_limits<float>::epsilon() / 2;  // fp32 unit roundoff
const double kBf16Rel = 1.0 / 256;  // bf16 rounding to nearest: |x - bf16(x)| <= 2^-8 |x|

// C[M, Cn] (+)= A[M, R] op(W) in double, op(W) = W^T (forward, W [Cn, R]) or W (input grad,
// W [R, Cn]); A rounded to bf16 first when `round_a`. mag = sum |a w| (+ |C0|) per element.
void reference(bool forward, const std::vector<float>& A, int64_t M, int64_t R, int64_t Cn,
               const std::vector<uint16_t>& W, bool round_a, const std::vector<float>& C0,
               bool accumulate, std::vector<double>* C, std::vector<double>* mag) {
  C->assign(size_t(M * Cn), 0.0);
  mag->assign(size_t(M * Cn), 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < Cn; ++c) {
      double s = 0, a_mag = 0;
      for (int64_t r = 0; r < R; ++r) {
        const float a32 = A[size_t(m * R + r)];
        const double a = round_a ? bf16_to_f32(f32_to_bf16(a32)) : a32;
        const double w = bf16_to_f32(W[size_t(forward ? c * R + r : r * Cn + c)]);
        s += a * w;
        a_mag += std::fabs(a * w);
      }
      const double c0 = accumulate ? C0[size_t(m * Cn + c)] : 0.0;
      (*C)[size_t(m * Cn + c)] = s + c0;
      (*mag)[size_t(m * Cn + c)] = a_mag + std::fabs(c0);
    }
}

// |got - ref| <= rel * mag element-wise; reports the first few misses.
void expect_within(const std::vector<double>& ref, const std::vector<double>& mag,
                   const std::vector<float>& got, double rel, const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double tol = rel * mag[i] + 1e-30;
    if (!(std::fabs(got[i] - ref[i]) <= tol) && bad++ < 5)
      ADD_FAILURE() << what << " at " << i << ": got " << got[i] << " want " << ref[i] << " tol "
                    << tol;
  }
}

// Runs the kernel's product: forward Y[M, N] from X[M, K], or input grad dX[M, K] from dY[M, N].
void run(Bf16Kernel k, bool forward, const std::vector<float>& A, int64_t M, int64_t N, int64_t K,
         const std::vector<uint16_t>& W, std::vector<float>* out, bool accumulate) {
  if (forward)
    kernels::bf16_linear_forward(k, A.data(), M, K, W.data(), N, out->data(), accumulate);
  else
    kernels::bf16_linear_input_grad(k, A.data(), M, N, W.data(), K, out->data(), accumulate);
}

// Skips (naming the missing CPU feature) when this machine cannot run `k`.
#define SKIP_UNLESS_AVAILABLE(k)                                                       \
  do {                                                                                 \
    if (!kernels::bf16_kernel_available(k))                                            \
      GTEST_SKIP() << "this CPU has no " << kernels::bf16_kernel_name(k) << " (needs " \
                   << ((k) == Bf16Kernel::kAmx ? "AMX-BF16 and Linux "                 \
                                                 "XTILEDATA permission"                \
                                               : "AVX512-BF16")                        \
                   << ")";                                                             \
  } while (0)

class Bf16Kernels : public ::testing::TestWithParam<Bf16Kernel> {};

// Every M (decode sizes 1-4 take the direct path, the rest the tiles), N, K not multiples of
// any block (K odd too; a reduction over 8192 is packed in parts), with and without
// accumulation, both products: within the fp32
// summation bound of the exact product of the bf16-rounded operands, and within the bf16
// rounding bound of the fp32 operands.
TEST_P(Bf16Kernels, MatchDoubleReferenceOnOddShapes) {
  const Bf16Kernel k = GetParam();
  SKIP_UNLESS_AVAILABLE(k);
  const std::pair<int64_t, int64_t> nks[] = {{1, 1},    {15, 31},    {33, 33},   {300, 77},
                                             {45, 520}, {130, 1100}, {20, 9000}, {9000, 20}};
  for (int64_t M : {1, 2, 3, 4, 5, 17, 513})
    for (auto [N, K] : nks)
      for (bool forward : {true, false})
        for (bool acc : {false, true}) {
          if (M * N * K > 20000000) continue;  // keeps the double loop short
          const int64_t R = forward ? K : N, Cn = forward ? N : K;
          const auto A = random_vec(M * R, uint32_t(M * 7 + N));
          const auto W = random_bf16(N * K, uint32_t(K));
          const auto C0 = random_vec(M * Cn, 3);
          std::vector<float> out = C0;
          run(k, forward, A, M, N, K, W, &out, acc);
          const std::string what =
              str_cat(kernels::bf16_kernel_name(k), forward ? " forward" : " input_grad", " M=", M,
                      " N=", N, " K=", K, " acc=", acc);
          std::vector<double> ref, mag;
          reference(forward, A, M, R, Cn, W, /*round_a=*/true, C0, acc, &ref, &mag);
          expect_within(ref, mag, out, double(R + 4) * kU, what + " (bf16 operands)");
          reference(forward, A, M, R, Cn, W, /*round_a=*/false, C0, acc, &ref, &mag);
          expect_within(ref, mag, out, kBf16Rel + double(R + 4) * kU, what + " (fp32 operands)");
        }
}

// The tolerance above is not loose: the fp32 product of unrounded activations is farther from
// the bf16-operand reference than the kernels are, so a kernel that skipped the rounding fails.
TEST_P(Bf16Kernels, RoundsActivationsToBf16) {
  const Bf16Kernel k = GetParam();
  SKIP_UNLESS_AVAILABLE(k);
  const int64_t M = 20, N = 40, K = 256;
  const auto X = random_vec(M * K, 5);
  const auto W = random_bf16(N * K, 6);
  std::vector<float> out(size_t(M * N));
  run(k, true, X, M, N, K, W, &out, false);
  std::vector<double> rounded, exact, mag;
  reference(true, X, M, K, N, W, true, out, false, &rounded, &mag);
  reference(true, X, M, K, N, W, false, out, false, &exact, &mag);
  double to_rounded = 0, to_exact = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    to_rounded = std::max(to_rounded, std::fabs(out[i] - rounded[i]));
    to_exact = std::max(to_exact, std::fabs(out[i] - exact[i]));
  }
  EXPECT_LT(to_rounded * 20, to_exact);
}

// The blocking depends on the shapes alone: 1 and 2 threads give the same bits.
TEST_P(Bf16Kernels, ResultsDoNotDependOnThreadCount) {
  const Bf16Kernel k = GetParam();
  SKIP_UNLESS_AVAILABLE(k);
  for (int64_t M : {3, 300})
    for (bool forward : {true, false}) {
      const int64_t N = 700, K = 1100;
      const auto A = random_vec(M * (forward ? K : N), 8);
      const auto W = random_bf16(N * K, 9);
      std::vector<float> one(size_t(M * (forward ? N : K))), two(one.size());
      set_max_threads(1);
      run(k, forward, A, M, N, K, W, &one, false);
      set_max_threads(2);
      run(k, forward, A, M, N, K, W, &two, false);
      set_max_threads(0);
      EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0)
          << kernels::bf16_kernel_name(k) << (forward ? " forward" : " input_grad") << " M=" << M;
    }
}

// An f16 weight gives, bit for bit, the bf16 product on the weight rounded to bf16, in both
// products and with accumulation; shapes cross the panel and k-block edges.
TEST_P(Bf16Kernels, F16WeightsEqualTheProductOnTheirBf16Rounding) {
  const Bf16Kernel k = GetParam();
  SKIP_UNLESS_AVAILABLE(k);
  for (int64_t M : {37, 300})
    for (bool forward : {true, false}) {
      const int64_t N = 83, K = 1061;
      const auto A = random_vec(M * (forward ? K : N), 12);
      const auto f = random_vec(N * K, 13);
      std::vector<uint16_t> w16(f.size()), rounded(f.size());
      for (size_t i = 0; i < f.size(); ++i) {
        w16[i] = f32_to_f16(f[i] * 3.0f);
        rounded[i] = f32_to_bf16(f16_to_f32(w16[i]));
      }
      for (bool accumulate : {false, true}) {
        std::vector<float> want(size_t(M * (forward ? N : K)), 0.5f), got(want);
        run(k, forward, A, M, N, K, rounded, &want, accumulate);
        if (forward)
          kernels::bf16_f16_linear_forward(k, A.data(), M, K, w16.data(), N, got.data(),
                                           accumulate);
        else
          kernels::bf16_f16_linear_input_grad(k, A.data(), M, N, w16.data(), K, got.data(),
                                              accumulate);
        EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
            << kernels::bf16_kernel_name(k) << (forward ? " forward" : " input_grad") << " M=" << M
            << " accumulate=" << accumulate;
      }
    }
}

TEST_P(Bf16Kernels, EmptyReductionZeroesOrKeepsTheOutput) {
  const Bf16Kernel k = GetParam();
  SKIP_UNLESS_AVAILABLE(k);
  std::vector<float> y(6, 2.0f);
  const float x = 0;
  const uint16_t w = 0;
  kernels::bf16_linear_forward(k, &x, 2, 0, &w, 3, y.data(), true);
  EXPECT_EQ(y, std::vector<float>(6, 2.0f));
  kernels::bf16_linear_forward(k, &x, 2, 0, &w, 3, y.data(), false);
  EXPECT_EQ(y, std::vector<float>(6, 0.0f));
  std::fill(y.begin(), y.end(), 2.0f);
  kernels::bf16_linear_input_grad(k, &x, 3, 0, &w, 2, y.data(), false);
  EXPECT_EQ(y, std::vector<float>(6, 0.0f));
}

INSTANTIATE_TEST_SUITE_P(Variants, Bf16Kernels,
                         ::testing::Values(Bf16Kernel::kAmx, Bf16Kernel::kAvx512Bf16),
                         [](const auto& info) {
                           return std::string(kernels::bf16_kernel_name(info.param));
                         });

TEST(Bf16Gemm, RejectsBadArguments) {
  std::vector<float> x(8), y(8);
  std::vector<uint16_t> w(8);
  EXPECT_THROW(
      kernels::bf16_linear_forward(Bf16Kernel::kNone, x.data(), 2, 2, w.data(), 2, y.data(), false),
      Error);
  EXPECT_THROW(kernels::parse_bf16_kernel("avx2"), Error);
  EXPECT_EQ(kernels::parse_bf16_kernel("amx"), Bf16Kernel::kAmx);
  if (kernels::bf16_kernel() == Bf16Kernel::kNone) return;
  EXPECT_THROW(kernels::bf16_linear_forward(kernels::bf16_kernel(), x.data(), -1, 2, w.data(), 2,
                                            y.data(), false),
               Error);
  EXPECT_THROW(kernels::bf16_linear_input_grad(kernels::bf16_kernel(), nullptr, 2, 2, w.data(), 2,
                                               y.data(), false),
               Error);
}

TEST(Bf16Gemm, KernelAvailabilityFollowsCpuFeatures) {
  const kernels::CpuFeatures& f = kernels::cpu_features();
  EXPECT_EQ(kernels::bf16_kernel_available(Bf16Kernel::kAvx512Bf16), f.avx512_bf16);
  if (!f.amx_bf16) {
    EXPECT_FALSE(kernels::bf16_kernel_available(Bf16Kernel::kAmx));
  }
  EXPECT_TRUE(kernels::bf16_kernel_available(Bf16Kernel::kNone));
  const Bf16Kernel chosen = kernels::bf16_kernel();
  EXPECT_TRUE(kernels::bf16_kernel_available(chosen));
  std::printf("bf16 kernel on this machine: %s\n", kernels::bf16_kernel_name(chosen));
}

// The forward product X W^T and the input gradient dY W of a linear layer with M rows, through
// the dispatch the model uses (linear_forward / linear_input_grad) under `compute`.
std::pair<std::vector<float>, std::vector<float>> linear_products(const std::vector<float>& X,
                                                                  const std::vector<float>& dY,
                                                                  int64_t M, const Weight& w,
                                                                  const ComputeChoice& compute) {
  const int64_t N = w.rows(), K = w.cols();
  std::vector<float> y(size_t(M * N)), dx(size_t(M * K));
  linear_forward(X.data(), M, K, w, y.data(), false, compute);
  linear_input_grad(dY.data(), M, N, w, dx.data(), false, compute);
  return {y, dx};
}

// linear_forward / linear_input_grad: bf16 compute on a bf16 weight runs the selected kernel
// (bit for bit); forcing kernel "none", or F32 compute, or an f32 / f16 weight gives today's
// fp32 path bit for bit.
TEST(Bf16Gemm, LinearProductsDispatchOnComputeDTypeAndKernel) {
  const int64_t N = 96, K = 80;
  const auto w32 = random_vec(N * K, 12);
  const Weight W = Weight::from_f32(w32.data(), N, K, DType::BF16);
  const Weight W16 = Weight::from_f32(w32.data(), N, K, DType::F16);
  const auto* wb = static_cast<const uint16_t*>(W.data());
  std::vector<uint16_t> wvec(wb, wb + N * K);
  for (int64_t M : {2, 40}) {
    const auto X = random_vec(M * K, 13), dY = random_vec(M * N, 14);
    auto products = [&](const Weight& w, const ComputeChoice& c) {
      return linear_products(X, dY, M, w, c);
    };
    const auto today = products(W, kF32Compute), today16 = products(W16, kF32Compute);
    EXPECT_EQ(products(W, bf16_compute(Bf16Kernel::kNone)), today) << "kernel none, M=" << M;
    EXPECT_EQ(products(W16, bf16_compute(Bf16Kernel::kNone)), today16) << "f16 weight, M=" << M;
    for (Bf16Kernel k : {Bf16Kernel::kAmx, Bf16Kernel::kAvx512Bf16}) {
      if (!kernels::bf16_kernel_available(k)) continue;
      EXPECT_EQ(products(W, {ComputeDType::F32, k}), today)
          << kernels::bf16_kernel_name(k) << " with f32 compute";
      std::vector<float> y(size_t(M * N)), dx(size_t(M * K));
      run(k, true, X, M, N, K, wvec, &y, false);
      run(k, false, dY, M, N, K, wvec, &dx, false);
      const auto got = products(W, bf16_compute(k));
      EXPECT_EQ(got.first, y) << kernels::bf16_kernel_name(k) << " forward M=" << M;
      EXPECT_EQ(got.second, dx) << kernels::bf16_kernel_name(k) << " input grad M=" << M;
      EXPECT_NE(got.first, today.first) << "bf16 compute should round X, M=" << M;
      // f16: decode sizes keep the exact fp32 path, larger products go to the bf16 kernels.
      const auto got16 = products(W16, bf16_compute(k));
      if (M <= kQuantStreamRows) {
        EXPECT_EQ(got16, today16) << kernels::bf16_kernel_name(k) << " f16 weight, M=" << M;
      } else {
        const auto* w16 = static_cast<const uint16_t*>(W16.data());
        kernels::bf16_f16_linear_forward(k, X.data(), M, K, w16, N, y.data(), false);
        kernels::bf16_f16_linear_input_grad(k, dY.data(), M, N, w16, K, dx.data(), false);
        EXPECT_EQ(got16.first, y) << kernels::bf16_kernel_name(k) << " f16 forward M=" << M;
        EXPECT_EQ(got16.second, dx) << kernels::bf16_kernel_name(k) << " f16 input grad M=" << M;
      }
    }
  }
}

// bf16_max_rows: dense bf16 products with more rows take the fp32 path bit for bit (forward and
// input gradient), those within it the bf16 kernel; what `auto` sets comes from
// auto_bf16_max_rows (decode sizes on Intel's AVX512-BF16 alone, else every size).
TEST(Bf16Gemm, ProductsAboveTheRowLimitTakeTheFp32Path) {
  EXPECT_EQ(auto_bf16_max_rows(Bf16Kernel::kAvx512Bf16, true), 4);
  EXPECT_EQ(auto_bf16_max_rows(Bf16Kernel::kAvx512Bf16, false), kBf16AllRows);
  EXPECT_EQ(auto_bf16_max_rows(Bf16Kernel::kAmx, true), kBf16AllRows);
  const int64_t N = 64, K = 48;
  const auto w32 = random_vec(N * K, 21);
  const Weight W = Weight::from_f32(w32.data(), N, K, DType::BF16);
  const auto* wb = static_cast<const uint16_t*>(W.data());
  const std::vector<uint16_t> wvec(wb, wb + N * K);
  for (Bf16Kernel k : {Bf16Kernel::kAmx, Bf16Kernel::kAvx512Bf16}) {
    if (!kernels::bf16_kernel_available(k)) {
      std::printf("this CPU has no %s: its case is not run\n", kernels::bf16_kernel_name(k));
      continue;
    }
    for (int64_t M : {3, 4, 5, 33}) {
      const auto X = random_vec(M * K, 22), dY = random_vec(M * N, 23);
      auto products = [&](const ComputeChoice& c) { return linear_products(X, dY, M, W, c); };
      const auto fp32 = products(kF32Compute);
      std::vector<float> y(size_t(M * N)), dx(size_t(M * K));
      run(k, true, X, M, N, K, wvec, &y, false);
      run(k, false, dY, M, N, K, wvec, &dx, false);
      const auto bf16 = std::make_pair(y, dx);
      ASSERT_NE(bf16, fp32) << "the two paths must differ for the test to tell them apart";
      EXPECT_EQ(products(bf16_compute(k, 4)), M <= 4 ? bf16 : fp32)
          << kernels::bf16_kernel_name(k) << " M=" << M;
      EXPECT_EQ(products(bf16_compute(k)), bf16)
          << kernels::bf16_kernel_name(k) << " M=" << M << ", no limit";
    }
  }
}

// The limit holds for the weights the bf16 kernels convert panel by panel too (f16, 4-bit):
// above it no bf16 units take their prefill-sized products, which run as where a CPU has none,
// bit for bit: a 4-bit forward on the int8 GEMM where this CPU has the int8 kernels, everything
// else on the fp32 path. Within kQuantStreamRows a quantized weight keeps its decode kernels
// whatever the limit.
TEST(Bf16Gemm, PanelConvertedWeightsObeyTheRowLimit) {
  const int64_t N = 64, K = 128;
  const auto w32 = random_vec(N * K, 31);
  const Weight f16 = Weight::from_f32(w32.data(), N, K, DType::F16);
  const Weight q4 =
      quantize_weight(Weight::from_f32(w32.data(), N, K, DType::BF16), {4, 64}, DType::BF16, "w");
  for (Bf16Kernel k : {Bf16Kernel::kAmx, Bf16Kernel::kAvx512Bf16}) {
    if (!kernels::bf16_kernel_available(k)) {
      std::printf("this CPU has no %s: its case is not run\n", kernels::bf16_kernel_name(k));
      continue;
    }
    for (const Weight* w : {&f16, &q4}) {
      const char* what = w == &f16 ? "f16" : "4-bit";
      for (int64_t M : {int64_t(3), kQuantStreamRows + 8}) {
        const auto X = random_vec(M * K, 32), dY = random_vec(M * N, 33);
        const auto fp32 = linear_products(X, dY, M, *w, kF32Compute);
        const auto unlimited = linear_products(X, dY, M, *w, bf16_compute(k));
        const auto limited = linear_products(X, dY, M, *w, bf16_compute(k, 2));
        if (M > kQuantStreamRows) {
          ASSERT_NE(unlimited, fp32)
              << what << ": the two paths must differ for the test to tell them apart";
          auto expected = fp32;
          if (w->is_quantized() && quant_int8_supported(w->quant()))
            quant_linear_forward_int8(X.data(), M, K, w->quant(), expected.first.data(), false);
          EXPECT_EQ(limited, expected) << kernels::bf16_kernel_name(k) << " " << what << " M=" << M;
        } else {
          EXPECT_EQ(limited, unlimited)
              << kernels::bf16_kernel_name(k) << " " << what << " M=" << M;
        }
      }
    }
  }
}

// Under bf16 compute a quantized weight's products on the bf16 units (the input gradient from
// kDecodeMaxM + 1 rows on, the forward from kQuantPanelRows) are the bf16 kernel's on the bf16
// rounding of the dequantized weight, bit for bit: for the widths whose codes are packed straight
// into the kernel's layouts (4, 8) and one converted through fp32 tiles (3), every scale dtype,
// and weight rows that end inside a group of 16 and a k-block.
TEST(Bf16Gemm, QuantizedProductsAreTheProductsOnTheRoundedWeight) {
  const int64_t N = 77, K = 384;
  const auto w32 = random_vec(N * K, 41);
  for (Bf16Kernel k : {Bf16Kernel::kAmx, Bf16Kernel::kAvx512Bf16}) {
    if (!kernels::bf16_kernel_available(k)) {
      std::printf("this CPU has no %s: its case is not run\n", kernels::bf16_kernel_name(k));
      continue;
    }
    for (int bits : {3, 4, 8})
      for (DType dtype : {DType::BF16, DType::F16, DType::F32}) {
        const Weight q =
            quantize_weight(Weight::from_f32(w32.data(), N, K, dtype), {bits, 64}, dtype, "w");
        std::vector<uint16_t> rounded(size_t(N * K));
        dequantize_tile_bf16(q.quant(), 0, N, 0, K, rounded.data(), K);
        const std::string what = str_cat(kernels::bf16_kernel_name(k), " ", bits, "-bit, ",
                                         dtype_name(dtype), " scales");
        for (int64_t M : {int64_t(5), int64_t(17), kQuantStreamRows + 1, int64_t(70)}) {
          const auto dY = random_vec(M * N, 42);
          std::vector<float> got(size_t(M * K)), want(size_t(M * K));
          linear_input_grad(dY.data(), M, N, q, got.data(), false, bf16_compute(k));
          kernels::bf16_linear_input_grad(k, dY.data(), M, N, rounded.data(), K, want.data(),
                                          false);
          EXPECT_EQ(got, want) << what << ", input gradient, M=" << M;
          if (M < gemm_detail::kQuantPanelRows) continue;
          const auto X = random_vec(M * K, 43);
          std::vector<float> y(size_t(M * N)), y_want(size_t(M * N));
          linear_forward(X.data(), M, K, q, y.data(), false, bf16_compute(k));
          kernels::bf16_linear_forward(k, X.data(), M, K, rounded.data(), N, y_want.data(), false);
          EXPECT_EQ(y, y_want) << what << ", forward, M=" << M;
        }
      }
  }
}

}  // namespace
}  // namespace glm4
