// Quantized Weights behind the one dispatch point: linear_forward / linear_input_grad and the
// embedding give the products of the dequantized matrix (fp32 compute), the bf16 prefill path
// equals the dense bf16 kernels on the bf16-rounded dequantized matrix bit for bit, and
// widening, ownership accounting and block-wise quantization behave.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "autograd/compute_dtype.h"
#include "autograd/kernels/affine_quant.h"
#include "autograd/kernels/bf16_gemm.h"
#include "autograd/kernels/gemm.h"
#include "autograd/ops.h"
#include "autograd/weight.h"
#include "autograd/weight_quantize.h"
#include "base/check.h"
#include "tests/support/random_values.h"

namespace glm4 {
namespace {

using testing::randn;

Weight quantized(int64_t N, int64_t K, QuantFormat f, DType dt, uint32_t seed) {
  std::vector<float> w = randn(size_t(N * K), seed, 0.02f);
  return quantize_weight(Weight::from_f32(w.data(), N, K, dt), f, dt, "w");
}

double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, double(std::abs(a[i] - b[i])));
    scale = std::max(scale, double(std::abs(b[i])));
  }
  return worst / scale;
}

TEST(QuantWeight, ProductsEqualThoseOfTheDequantizedMatrix) {
  for (QuantFormat f : {QuantFormat{4, 64}, QuantFormat{8, 32}, QuantFormat{3, 128}}) {
    const int64_t N = 136, K = 384;
    const Weight q = quantized(N, K, f, DType::BF16, 3);
    std::vector<float> dense(size_t(N * K));
    q.to_f32(dense.data());
    const Weight d = Weight::copy_of(DType::F32, dense.data(), N, K);
    for (int64_t M : {1, 5, 32, 77}) {
      std::vector<float> x = randn(size_t(M * K), 4), dy = randn(size_t(M * N), 5);
      std::vector<float> yq(size_t(M * N)), yd(yq.size()), gq(size_t(M * K)), gd(gq.size());
      linear_forward(x.data(), M, K, q, yq.data(), false, kF32Compute);
      linear_forward(x.data(), M, K, d, yd.data(), false, kF32Compute);
      linear_input_grad(dy.data(), M, N, q, gq.data(), false, kF32Compute);
      linear_input_grad(dy.data(), M, N, d, gd.data(), false, kF32Compute);
      EXPECT_LE(max_rel(yq, yd), 1e-5) << f.bits << " bits, M " << M;
      EXPECT_LE(max_rel(gq, gd), 1e-5) << f.bits << " bits, M " << M;
    }
  }
}

// Under bf16 compute the prefill-sized products dequantize one panel at a time and run the bf16
// kernels: the same bits as those kernels on the whole matrix dequantized and rounded to bf16.
TEST(QuantWeight, Bf16PrefillEqualsTheDenseBf16KernelsBitForBit) {
  if (kernels::bf16_kernel() == kernels::Bf16Kernel::kNone) GTEST_SKIP() << "no native bf16";
  for (QuantFormat f : {QuantFormat{4, 64}, QuantFormat{5, 128}, QuantFormat{8, 32}}) {
    const int64_t N = 200, K = 640;  // odd tiles: 200 rows, 5 groups of 128
    const Weight q = quantized(N, K, f, DType::BF16, 9);
    std::vector<float> dense(size_t(N * K));
    q.to_f32(dense.data());
    const Weight d = Weight::from_f32(dense.data(), N, K, DType::BF16);
    const ComputeChoice bf16 = bf16_compute(kernels::bf16_kernel());
    for (int64_t M : {33, 100}) {
      std::vector<float> x = randn(size_t(M * K), 6), dy = randn(size_t(M * N), 7);
      std::vector<float> yq(size_t(M * N)), yd(yq.size()), gq(size_t(M * K)), gd(gq.size());
      linear_forward(x.data(), M, K, q, yq.data(), false, bf16);
      linear_forward(x.data(), M, K, d, yd.data(), false, bf16);
      linear_input_grad(dy.data(), M, N, q, gq.data(), false, bf16);
      linear_input_grad(dy.data(), M, N, d, gd.data(), false, bf16);
      EXPECT_EQ(yq, yd) << f.bits << " bits, M " << M;
      EXPECT_EQ(gq, gd) << f.bits << " bits, M " << M;
      linear_forward(x.data(), M, K, q, yq.data(), true, bf16);  // accumulate doubles it exactly
      for (size_t i = 0; i < yq.size(); ++i) ASSERT_EQ(yq[i], 2 * yd[i]);
    }
  }
}

TEST(QuantWeight, EmbeddingRowsAndWideningDequantize) {
  const Weight q = quantized(50, 128, {4, 32}, DType::F32, 11);
  std::vector<float> all(50 * 128), row(128);
  q.to_f32(all.data());
  const std::vector<int32_t> ids{3, 0, 49, 3};
  Tensor e = ops::embedding(ids, q);
  for (size_t i = 0; i < ids.size(); ++i) {
    q.row_to_f32(ids[i], row.data());
    for (int64_t j = 0; j < 128; ++j) {
      EXPECT_EQ(e.data()[i * 128 + j], all[size_t(ids[i] * 128 + j)]);
      EXPECT_EQ(row[size_t(j)], all[size_t(ids[i] * 128 + j)]);
    }
  }
  EXPECT_THROW(ops::embedding(std::vector<int32_t>{50}, q), Error);
}

TEST(QuantWeight, OwnedStorageIsCountedAndViewsAreNot) {
  const size_t before = weight_bytes_live();
  {
    const Weight q = quantized(64, 256, {4, 64}, DType::BF16, 1);
    EXPECT_TRUE(q.is_quantized());
    EXPECT_TRUE(q.owns_buffer());
    EXPECT_EQ(q.bytes(), size_t(64 * (256 / 2 + 2 * 4 * 2)));
    EXPECT_EQ(weight_bytes_live() - before, q.bytes());
    EXPECT_EQ(q.dtype(), DType::BF16);
    EXPECT_EQ(q.data(), nullptr);
    const Weight view = Weight::quantized_view(q.quant(), nullptr);
    EXPECT_FALSE(view.owns_buffer());
    EXPECT_EQ(weight_bytes_live() - before, q.bytes());
  }
  EXPECT_EQ(weight_bytes_live(), before);
  EXPECT_THROW(Weight::from_f32(std::vector<float>(4).data(), 2, 2).quant(), Error);
}

TEST(QuantWeight, BlockwiseQuantizationEqualsQuantizingTheWholeMatrix) {
  const int64_t N = 3000, K = 1536;  // more than one block of rows
  std::vector<float> w = randn(size_t(N * K), 2, 0.02f);
  const Weight stored = Weight::from_f32(w.data(), N, K, DType::BF16);
  const Weight blocks = quantize_weight(stored, {4, 64}, DType::BF16, "w");
  const QuantizedStorage whole = quantize_affine(DType::BF16, stored.data(), N, K, {4, 64}, "w");
  const QuantizedMatrix a = blocks.quant(), b = whole.view();
  EXPECT_EQ(std::memcmp(a.packed, b.packed, size_t(N * a.row_bytes())), 0);
  EXPECT_EQ(std::memcmp(a.scales, b.scales, size_t(N * a.groups() * 2)), 0);
  EXPECT_EQ(std::memcmp(a.biases, b.biases, size_t(N * a.groups() * 2)), 0);
}

}  // namespace
}  // namespace glm4
