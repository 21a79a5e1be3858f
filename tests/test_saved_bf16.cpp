// Saved activations in bf16: a packed storage holds the bf16 rounding of its values in half the
// bytes and widens them once, whatever thread asks first; a SavedInBf16 scope packs the activations
// the ops offered, and the backward computes from the rounded values.
#include <gtest/gtest.h>

#include <vector>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/saved_bf16.h"
#include "autograd/tensor.h"
#include "base/dtype.h"
#include "base/parallel.h"
#include "tests/support/random_values.h"

namespace glm4 {
namespace {

std::vector<float> rounded_to_bf16(std::vector<float> v) {
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}

bool packed(const Tensor& t) { return t.impl()->storage->packed(); }

TEST(SavedBf16, PackedStorageHoldsTheBf16RoundingInHalfTheBytes) {
  const std::vector<float> values = testing::randn(1000, 1);
  Tensor t = Tensor::from({10, 100}, values);
  const int64_t live = TensorMemory::live_bytes();
  t.impl()->storage->pack_bf16();
  EXPECT_TRUE(packed(t));
  EXPECT_EQ(TensorMemory::live_bytes(), live - 1000 * 2);
  EXPECT_EQ(t.to_vector(), rounded_to_bf16(values));  // reading widens it again
  EXPECT_FALSE(packed(t));
  EXPECT_EQ(TensorMemory::live_bytes(), live);
  EXPECT_NE(t.to_vector(), values);  // the rounding stays
}

TEST(SavedBf16, RoundingInPlaceGivesTheSameValuesInFp32) {
  const std::vector<float> values = testing::randn(1000, 13);
  Tensor t = Tensor::from({1000}, values);
  const int64_t live = TensorMemory::live_bytes();
  t.impl()->storage->round_to_bf16();
  EXPECT_FALSE(packed(t));
  EXPECT_EQ(TensorMemory::live_bytes(), live);
  EXPECT_EQ(t.to_vector(), rounded_to_bf16(values));
}

TEST(SavedBf16, ConcurrentReadersWidenItOnce) {
  const int64_t n = int64_t(1) << 20, chunks = 64;
  const std::vector<float> values = testing::randn(size_t(n), 2);
  Tensor t = Tensor::from({n}, values);
  t.impl()->storage->pack_bf16();
  std::vector<const float*> seen(static_cast<size_t>(chunks));
  std::vector<double> sums(static_cast<size_t>(chunks));
  parallel_for(chunks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const float* p = t.data();
      seen[size_t(c)] = p;
      double s = 0;
      for (int64_t i = c * (n / chunks); i < (c + 1) * (n / chunks); ++i) s += p[i];
      sums[size_t(c)] = s;
    }
  });
  const std::vector<float> expected = rounded_to_bf16(values);
  for (int64_t c = 0; c < chunks; ++c) {
    EXPECT_EQ(seen[size_t(c)], seen[0]);
    double s = 0;
    for (int64_t i = c * (n / chunks); i < (c + 1) * (n / chunks); ++i) s += expected[size_t(i)];
    EXPECT_EQ(sums[size_t(c)], s) << "chunk " << c;
  }
}

// dA of y = x A^T when the scope packed x: the gradient of the same product on x rounded to bf16
// beforehand, bit for bit, and not the gradient on x itself.
TEST(SavedBf16, BackwardReadsTheRoundedActivation) {
  const std::vector<float> xs = testing::randn(64 * 32, 3), as = testing::randn(8 * 32, 4);
  const Tensor weights = Tensor::from({64, 8}, testing::randn(64 * 8, 10));
  auto grad_of_a = [&](const std::vector<float>& x_values, bool scope_on) {
    Tensor x = Tensor::from({64, 32}, x_values);
    Tensor a = Tensor::from({8, 32}, as);
    a.set_requires_grad(true);
    Tensor y;
    {
      SavedInBf16 scope(scope_on);
      y = ops::linear(x, a, Tensor());
      scope.pack();
    }
    EXPECT_EQ(packed(x), scope_on);
    backward(ops::sum(ops::mul(y, weights)));  // y's gradient does not depend on y
    return a.grad().to_vector();
  };
  const std::vector<float> packed_grad = grad_of_a(xs, true);
  EXPECT_EQ(packed_grad, grad_of_a(rounded_to_bf16(xs), false));
  EXPECT_NE(packed_grad, grad_of_a(xs, false));
}

TEST(SavedBf16, OnlyOfferedActivationsOfTheInnermostOpenScopeArePacked) {
  Tensor p = Tensor::from({4, 16}, testing::randn(64, 5));
  p.set_requires_grad(true);
  const Tensor w = Tensor::from({16}, testing::randn(16, 6));
  const Tensor x = Tensor::from({4, 16}, testing::randn(64, 7));
  const Tensor g = Tensor::from({4, 16}, testing::randn(64, 8));
  SavedInBf16 scope(true);
  const Tensor a = Tensor::from({4, 16}, testing::randn(64, 11));
  Tensor norm_weight = Tensor::from({16}, testing::randn(16, 12));
  norm_weight.set_requires_grad(true);
  ops::rms_norm(a, norm_weight, 1e-5f);       // a is offered, the trainable weight is not
  Tensor y = ops::swiglu(g, ops::mul(x, p));  // g and x * p are offered
  Tensor m = ops::mul(x, p);
  {
    SavedInBf16 off(false);  // an off scope leaves offers to the enclosing one
    Tensor n = ops::rms_norm(m, w, 1e-5f);
    off.pack();
    EXPECT_FALSE(packed(m));
  }
  const Tensor fresh = Tensor::from({4, 16}, testing::randn(64, 9));
  ops::rms_norm(fresh, w, 1e-5f);  // nothing needs a gradient: no node, no offer
  scope.pack();
  EXPECT_FALSE(packed(norm_weight));
  EXPECT_FALSE(packed(p));
  EXPECT_TRUE(packed(a));
  EXPECT_TRUE(packed(g));
  EXPECT_TRUE(packed(m));
  EXPECT_FALSE(packed(x));  // mul keeps x, but mul offers nothing
  EXPECT_FALSE(packed(fresh));
}

}  // namespace
}  // namespace glm4
