// The int8 kernels of --compute bf16 (quant_decode_int8.h for decode sizes, quant_gemm_int8.h
// beyond): within their stated error bound of an fp64 product on the exact dequantized weights,
// far finer than bf16 rounding of X, for every group size, 4 and 8 bits, tails of a step, of a
// 32-row tile, of a 512-column block and of a 6-row register block, 1-70 rows; independent of the
// thread count; inf and NaN carried as the fp32 kernels carry them; chosen by linear_forward under
// bf16 only, where no bf16 units take the product.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "autograd/compute_dtype.h"
#include "autograd/kernels/affine_pack.h"
#include "autograd/kernels/bf16_gemm.h"
#include "autograd/kernels/gemm.h"
#include "autograd/kernels/quant_decode_int8.h"
#include "autograd/kernels/quant_gemm_int8.h"
#include "autograd/kernels/quant_linear.h"
#include "autograd/weight.h"
#include "autograd/weight_quantize.h"
#include "base/check.h"
#include "base/parallel.h"
#include "tests/support/random_values.h"

namespace glm4 {
namespace {

using testing::randn;

// Scales and biases of `scale_dtype` (the weight's dtype, as mlx keeps them).
Weight quantized(int64_t N, int64_t K, QuantFormat f, uint32_t seed,
                 DType scale_dtype = DType::BF16) {
  std::vector<float> w = randn(size_t(N * K), seed, 0.02f);
  return quantize_weight(Weight::from_f32(w.data(), N, K, scale_dtype), f, scale_dtype, "w");
}

// This process has int8 kernels (AVX512-VNNI, or AVX2 on a CPU without it; 4 and 8 bits).
bool int8_kernels() { return quant_detail::int8_isa() != quant_detail::Int8Isa::kNone; }

// Per output: the fp64 product on the exact dequantized W, and the bound the kernel promises:
// each X element off by at most one unit (max|x| of its group / (127 * 256)) times
// |scale * code| (the bias term uses the fp32 sum of X), plus fp32 summation slack.
struct Reference {
  std::vector<double> y, bound;
};
Reference reference(const QuantizedMatrix& q, const std::vector<float>& X, int64_t M) {
  const int64_t N = q.rows, K = q.cols, gs = q.group_size;
  Reference ref{std::vector<double>(size_t(M * N)), std::vector<double>(size_t(M * N))};
  std::vector<uint8_t> codes(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; ++n) {
    unpack_codes(q.bits, q.row(n), 0, K, codes.data());
    for (int64_t m = 0; m < M; ++m) {
      double y = 0, bound = 0, magnitude = 0;
      for (int64_t g = 0; g < K / gs; ++g) {
        double amax = 0;
        for (int64_t c = g * gs; c < (g + 1) * gs; ++c)
          amax = std::max(amax, std::fabs(double(X[size_t(m * K + c)])));
        const double unit = amax / (127.0 * 256.0), s = q.scale(n, g), b = q.bias(n, g);
        for (int64_t c = g * gs; c < (g + 1) * gs; ++c) {
          const double x = X[size_t(m * K + c)], w = s * codes[size_t(c)] + b;
          y += w * x;
          bound += std::fabs(s * codes[size_t(c)]) * unit;
          magnitude += std::fabs(w * x) + std::fabs(s * codes[size_t(c)] * x);
        }
      }
      ref.y[size_t(m * N + n)] = y;
      ref.bound[size_t(m * N + n)] = bound + 1e-6 * magnitude;
    }
  }
  return ref;
}

// Every output within the reference's bound.
::testing::AssertionResult within_bound(const std::vector<float>& y, const Reference& ref) {
  for (size_t i = 0; i < y.size(); ++i)
    if (!(std::fabs(y[i] - ref.y[i]) <= ref.bound[i]))
      return ::testing::AssertionFailure() << "output " << i << ": " << y[i] << " against "
                                           << ref.y[i] << ", bound " << ref.bound[i];
  return ::testing::AssertionSuccess();
}

double relative_rms(const std::vector<float>& got, const std::vector<double>& ref) {
  double e = 0, r = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    e += (got[i] - ref[i]) * (got[i] - ref[i]);
    r += ref[i] * ref[i];
  }
  return std::sqrt(e / r);
}

// body(format, K) for every format the int8 kernels take here (4 and 8 bits, and on AVX-512 CPUs
// with VBMI the decode of 2, 3, 5 and 6 bits; each group size) and K within one 128-column step,
// across three, and off a step by 32 and by 64 columns, wherever the group size divides K.
// `widths_of` says which widths: int8_supported (this CPU's kernels) unless given.
template <class Body>
void for_each_format(
    const Body& body,
    bool (*widths_of)(int bits) = [](int bits) { return quant_detail::int8_supported(bits); }) {
  for (int bits : {2, 3, 4, 5, 6, 8})
    if (widths_of(bits))
      for (int gs : {32, 64, 128})
        for (int64_t K : {int64_t{128}, int64_t{384}, int64_t{1152 + 32}, int64_t{1152 + 64}})
          if (K % gs == 0) body(QuantFormat{bits, gs}, K);
}

TEST(QuantDecodeInt8, WithinItsBoundOfTheExactProductForEveryFormatAndTail) {
  if (!int8_kernels()) GTEST_SKIP() << "this CPU has neither AVX512-VNNI nor AVX2: no int8 kernels";
  for_each_format([](QuantFormat f, int64_t K) {
    const int bits = f.bits, gs = f.group_size;
    // Not a multiple of the 8 or 4 rows a decode pass takes nor of the GEMM's 32-row tiles.
    const int64_t N = 37;
    const Weight w = quantized(N, K, f, uint32_t(K + gs + bits));
    for (int64_t M : {1, 2, 3, 4, 5, 32, 33, 70}) {
      const std::vector<float> X = randn(size_t(M * K), uint32_t(M + K));
      const Reference ref = reference(w.quant(), X, M);
      std::vector<float> y(size_t(M * N));
      quant_linear_forward_int8(X.data(), M, K, w.quant(), y.data(), false);
      ASSERT_TRUE(within_bound(y, ref))
          << bits << " bits, group " << gs << ", K " << K << ", M " << M;
      // bf16 rounding of X alone is about 1.6e-3 here (bench_quant's error report).
      EXPECT_LT(relative_rms(y, ref.y), 2e-4) << bits << " bits, group " << gs << ", K " << K;
    }
  });
}

// The decode kernels read a whole block of 16 groups' scales and biases in their stored dtype
// (bf16, f16 or f32) and the shorter last block of a row by another path: each dtype, with rows
// of one block, of whole blocks and of whole blocks plus a shorter one, stays within the bound.
TEST(QuantDecodeInt8, EveryScaleDtypeAndBlockTail) {
  if (!int8_kernels()) GTEST_SKIP() << "this CPU has neither AVX512-VNNI nor AVX2: no int8 kernels";
  for (DType scale_dtype : {DType::BF16, DType::F16, DType::F32})
    for (int bits : {4, 8})
      for (int64_t K : {int64_t{1024}, int64_t{2048}, int64_t{2048 + 3 * 64}, int64_t{640}}) {
        SCOPED_TRACE(std::string(dtype_name(scale_dtype)) + ", " + std::to_string(bits) +
                     " bits, K " + std::to_string(K));
        const int64_t N = 19;
        const Weight w = quantized(N, K, {bits, 64}, uint32_t(K + bits), scale_dtype);
        ASSERT_EQ(w.quant().scale_dtype, scale_dtype);
        for (int64_t M : {1, 2, 4}) {
          const std::vector<float> X = randn(size_t(M * K), uint32_t(M * 7 + K));
          const Reference ref = reference(w.quant(), X, M);
          std::vector<float> y(size_t(M * N));
          quant_linear_forward_int8(X.data(), M, K, w.quant(), y.data(), false);
          ASSERT_TRUE(within_bound(y, ref)) << "M " << M;
        }
      }
}

// The AVX2 form (4 and 8 bits), called directly: within the same bound for every group size, K
// off a 128-column step and off a 64-column half (group 32), 1-4 rows of X and the row tails of
// its 4- and 2-row passes; accumulating; and on a VNNI CPU equal to the AVX-512 kernel up to fp32
// summation order, from the same prepared levels.
TEST(QuantDecodeInt8, Avx2FormWithinTheSameBound) {
  using quant_detail::Int8Isa;
  if (!quant_detail::int8_isa_runs(Int8Isa::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2";
  for_each_format(
      [](QuantFormat f, int64_t K) {
        const int gs = f.group_size;
        const int64_t N = 37;
        SCOPED_TRACE(std::to_string(f.bits) + " bits");
        const Weight w = quantized(N, K, f, uint32_t(K + gs + f.bits));
        const QuantizedMatrix& q = w.quant();
        for (int64_t M : {1, 2, 3, 4}) {
          const std::vector<float> X = randn(size_t(M * K), uint32_t(M + K));
          const Reference ref = reference(q, X, M);
          quant_detail::Int8DecodeInput in;
          ASSERT_TRUE(quant_detail::prepare_int8_decode_input(
              q, X.data(), M, in, quant_detail::Int8Layout::kDecode, Int8Isa::kAvx2));
          std::vector<float> y(size_t(M * N));
          quant_detail::int8_decode_rows(q, in, 0, M, 0, N, y.data(), N, false, Int8Isa::kAvx2);
          ASSERT_TRUE(within_bound(y, ref)) << "group " << gs << ", K " << K << ", M " << M;
          EXPECT_LT(relative_rms(y, ref.y), 2e-4) << "group " << gs << ", K " << K;
          std::vector<float> acc(y.size(), 1.5f);
          quant_detail::int8_decode_rows(q, in, 0, M, 0, N, acc.data(), N, true, Int8Isa::kAvx2);
          for (size_t i = 0; i < acc.size(); ++i) ASSERT_EQ(acc[i], 1.5f + y[i]) << i;
          if (!quant_detail::int8_isa_runs(Int8Isa::kAvx512Vnni)) continue;
          quant_detail::Int8DecodeInput in512;
          ASSERT_TRUE(quant_detail::prepare_int8_decode_input(
              q, X.data(), M, in512, quant_detail::Int8Layout::kDecode, Int8Isa::kAvx512Vnni));
          EXPECT_EQ(in.q1, in512.q1) << "the same levels";
          EXPECT_EQ(in.q2, in512.q2);
          EXPECT_EQ(in.units, in512.units);
          std::vector<float> y512(y.size());
          quant_detail::int8_decode_rows(q, in512, 0, M, 0, N, y512.data(), N, false,
                                         Int8Isa::kAvx512Vnni);
          EXPECT_LT(relative_rms(y, std::vector<double>(y512.begin(), y512.end())), 1e-6)
              << "group " << gs << ", K " << K << ", M " << M;
        }
      },
      [](int bits) { return bits == 4 || bits == 8; });
}

// Both forms on rows longer than the 256 groups the AVX2 4-bit kernel sets up at once (group 64
// and 128, the last chunk ending mid-step for group 64; the VNNI kernel's 16-group blocks run
// through as many): within the bound, and each output the same bits whether its row is taken in
// a 4-row pass, a 2-row one or alone.
TEST(QuantDecodeInt8, FormsOnRowsOfSeveralChunksAreOneSumPerOutput) {
  using quant_detail::Int8Isa;
  if (!quant_detail::int8_isa_runs(Int8Isa::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2";
  for (Int8Isa isa : {Int8Isa::kAvx2, Int8Isa::kAvx512Vnni}) {
    if (!quant_detail::int8_isa_runs(isa)) continue;  // an AVX2-only CPU: its one form
    SCOPED_TRACE(isa == Int8Isa::kAvx2 ? "avx2" : "avx512-vnni");
    for (auto [gs, K] : {std::pair<int, int64_t>{64, 256 * 64 + 64}, {128, 256 * 128 + 128}}) {
      const int64_t N = 7;
      const Weight w = quantized(N, K, {4, gs}, uint32_t(gs));
      const QuantizedMatrix& q = w.quant();
      for (int64_t M : {1, 2, 3}) {
        const std::vector<float> X = randn(size_t(M * K), uint32_t(M + gs));
        const Reference ref = reference(q, X, M);
        quant_detail::Int8DecodeInput in;
        ASSERT_TRUE(quant_detail::prepare_int8_decode_input(
            q, X.data(), M, in, quant_detail::Int8Layout::kDecode, isa));
        std::vector<float> y(size_t(M * N)), alone(y.size());
        quant_detail::int8_decode_rows(q, in, 0, M, 0, N, y.data(), N, false, isa);
        ASSERT_TRUE(within_bound(y, ref)) << "group " << gs << ", M " << M;
        for (int64_t n = 0; n < N; ++n)
          quant_detail::int8_decode_rows(q, in, 0, M, n, n + 1, alone.data(), N, false, isa);
        EXPECT_EQ(y, alone) << "group " << gs << ", M " << M;
      }
    }
  }
}

// The AVX2 int8 GEMM (4 and 8 bits), called directly: within the bound for every group size, K
// within one 512-column block and across three, W's rows ending inside a 16-row half and inside
// an 8-row vector of a tile, X's rows an odd count (the 2-row register block's tail); on a VNNI
// CPU bit for bit the AVX-512 GEMM's, from the same levels (the AVX-512 kernel ignores the joined
// int16 copy the AVX2 one reads at 8 bits).
TEST(QuantDecodeInt8, Avx2GemmWithinTheBoundAndEqualToTheAvx512One) {
  using quant_detail::Int8Isa;
  if (!quant_detail::int8_isa_runs(Int8Isa::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2";
  for_each_format(
      [](QuantFormat f, int64_t K) {
        const int bits = f.bits, gs = f.group_size;
        for (int64_t N : {int64_t{37}, int64_t{59}}) {
          const Weight w = quantized(N, K, f, uint32_t(K + gs + N + bits));
          const QuantizedMatrix& q = w.quant();
          for (int64_t M : {5, 32, 33}) {
            SCOPED_TRACE(std::to_string(bits) + " bits, group " + std::to_string(gs) + ", K " +
                         std::to_string(K) + ", N " + std::to_string(N) + ", M " +
                         std::to_string(M));
            const std::vector<float> X = randn(size_t(M * K), uint32_t(M + K));
            const Reference ref = reference(q, X, M);
            quant_detail::Int8DecodeInput in;
            ASSERT_TRUE(quant_detail::prepare_int8_decode_input(
                q, X.data(), M, in, quant_detail::Int8Layout::kColumns, Int8Isa::kAvx2));
            std::vector<float> y(size_t(M * N), std::nanf(""));
            quant_detail::int8_gemm_rows(q, in, M, 0, N, y.data(), N, Int8Isa::kAvx2);
            ASSERT_TRUE(within_bound(y, ref));
            EXPECT_LT(relative_rms(y, ref.y), 2e-4);
            if (!quant_detail::int8_isa_runs(Int8Isa::kAvx512Vnni)) continue;
            std::vector<float> y512(y.size(), std::nanf(""));
            quant_detail::int8_gemm_rows(q, in, M, 0, N, y512.data(), N, Int8Isa::kAvx512Vnni);
            ASSERT_EQ(y, y512);
          }
        }
      },
      [](int bits) { return bits == 4 || bits == 8; });
}

TEST(QuantDecodeInt8, AccumulatesAndIgnoresTheThreadCount) {
  if (!int8_kernels()) GTEST_SKIP() << "this CPU has neither AVX512-VNNI nor AVX2: no int8 kernels";
  for (int64_t M : {int64_t{3}, int64_t{40}}) {  // a decode, then a GEMM over several chunks
    const int64_t N = 1000, K = 2816;
    const Weight w = quantized(N, K, {4, 64}, 21);
    const std::vector<float> X = randn(size_t(M * K), 22);
    const int threads = max_threads();
    std::vector<float> one(size_t(M * N)), many(one.size());
    set_max_threads(1);
    quant_linear_forward_int8(X.data(), M, K, w.quant(), one.data(), false);
    set_max_threads(std::max(2, threads));
    quant_linear_forward_int8(X.data(), M, K, w.quant(), many.data(), false);
    set_max_threads(threads);
    EXPECT_EQ(one, many);
    std::vector<float> acc(one.size(), 1.5f);
    quant_linear_forward_int8(X.data(), M, K, w.quant(), acc.data(), true);
    for (size_t i = 0; i < acc.size(); ++i) ASSERT_EQ(acc[i], 1.5f + one[i]) << M << " rows, " << i;
  }
}

TEST(QuantDecodeInt8, InfAndNanGoToTheFp32Kernels) {
  if (!int8_kernels()) GTEST_SKIP() << "this CPU has neither AVX512-VNNI nor AVX2: no int8 kernels";
  const int64_t N = 16, K = 256;
  const Weight w = quantized(N, K, {8, 64}, 5);
  for (int64_t M : {int64_t{1}, int64_t{40}})
    for (float bad : {INFINITY, NAN}) {
      std::vector<float> X = randn(size_t(M * K), 6);
      X[size_t((M - 1) * K + 100)] = bad;
      std::vector<float> got(size_t(M * N)), want(size_t(M * N));
      quant_linear_forward_int8(X.data(), M, K, w.quant(), got.data(), false);
      quant_linear_forward(X.data(), M, K, w.quant(), want.data(), false);
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(std::isnan(got[i]), std::isnan(want[i])) << M << " rows, " << i;
        if (!std::isnan(want[i])) {
          EXPECT_EQ(got[i], want[i]) << M << " rows, " << i;
        }
      }
    }
}

// Under bf16 compute a quantized product takes the int8 kernels where no bf16 units take it:
// decode sizes always (with bf16 units or without them: kernel "none", a VNNI CPU without
// AVX512-BF16), prefill sizes without bf16 units; f32 compute keeps the fp32 kernels.
TEST(QuantDecodeInt8, LinearForwardTakesItUnderBf16ComputeOnly) {
  if (!int8_kernels()) GTEST_SKIP() << "this CPU has neither AVX512-VNNI nor AVX2: no int8 kernels";
  const int64_t N = 64, K = 512;
  const Weight w = quantized(N, K, {4, 32}, 8);
  const int64_t prefill = kQuantStreamRows + 8;  // not a decode
  for (int64_t M : {int64_t{2}, prefill}) {
    const std::vector<float> X = randn(size_t(M * K), uint32_t(9 + M));
    std::vector<float> int8(size_t(M * N)), fp32(int8.size()), got(int8.size());
    quant_linear_forward_int8(X.data(), M, K, w.quant(), int8.data(), false);
    quant_linear_forward(X.data(), M, K, w.quant(), fp32.data(), false);
    ASSERT_NE(int8, fp32);
    linear_forward(X.data(), M, K, w, got.data(), false, bf16_compute(kernels::Bf16Kernel::kNone));
    EXPECT_EQ(got, int8) << M << " rows without bf16 units";
    if (kernels::bf16_kernel() != kernels::Bf16Kernel::kNone) {
      linear_forward(X.data(), M, K, w, got.data(), false, bf16_compute(kernels::bf16_kernel()));
      if (M == 2)
        EXPECT_EQ(got, int8) << "a decode with bf16 units";
      else
        EXPECT_NE(got, int8) << "a prefill with bf16 units takes them";
    }
    linear_forward(X.data(), M, K, w, got.data(), false, kF32Compute);
    EXPECT_EQ(got, fp32) << M << " rows";
  }
}

TEST(QuantDecodeInt8, RejectsOtherWidthsAndShapes) {
  if (!int8_kernels()) GTEST_SKIP() << "this CPU has neither AVX512-VNNI nor AVX2: no int8 kernels";
  const int64_t K = 128;
  const Weight w = quantized(8, K, {4, 64}, 1);
  std::vector<float> X(size_t(33 * K)), y(size_t(33 * 8));
  try {
    quant_linear_forward_int8(X.data(), 33, K + 64, w.quant(), y.data(), false);
    FAIL() << "a wrong K accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("quant_linear_forward_int8"), std::string::npos)
        << e.what();
  }
  const Weight w3 = quantized(8, K, {3, 64}, 2);
  if (quant_int8_supported(w3.quant())) return;  // AVX512-VBMI: 3 bits decode on int8 too
  EXPECT_THROW(quant_linear_forward_int8(X.data(), 1, K, w3.quant(), y.data(), false), Error);
  EXPECT_THROW(quant_linear_forward_int8(X.data(), 40, K, w3.quant(), y.data(), false), Error);
}

// Both instruction sets take 4- and 8-bit codes, for decode and the GEMM; 2, 3, 5 and 6 bits
// only the AVX-512 decode, on a CPU with AVX512-VBMI; kNone nothing.
TEST(QuantDecodeInt8, WhichWidthsEachInstructionSetTakes) {
  using quant_detail::Int8Isa;
  const bool vbmi = __builtin_cpu_supports("avx512vbmi");
  for (Int8Isa isa : {Int8Isa::kAvx2, Int8Isa::kAvx512Vnni})
    for (int bits : {2, 3, 4, 5, 6, 8}) {
      const bool whole = bits == 4 || bits == 8;
      EXPECT_EQ(quant_detail::int8_gemm_supported(bits, isa), whole) << bits;
      EXPECT_EQ(quant_detail::int8_supported(bits, isa),
                whole || (isa == Int8Isa::kAvx512Vnni && vbmi))
          << bits;
    }
  EXPECT_FALSE(quant_detail::int8_supported(4, Int8Isa::kNone));
}

}  // namespace
}  // namespace glm4
