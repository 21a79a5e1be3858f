// Gradient clipping (train/grad_clip.h): the global norm over every gradient, its independence of
// the thread count, and non-finite norms (the numbers against torch are in test_adamw.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "base/parallel.h"
#include "tests/support/expect_error.h"
#include "tests/support/random_values.h"
#include "train/grad_clip.h"

namespace glm4 {
namespace {

using glm4::testing::expect_error;

Tensor random_tensor(const Shape& shape, uint32_t seed, float scale = 1.0f) {
  return Tensor::from(shape, testing::randn(size_t(shape_numel(shape)), seed, scale));
}

TEST(GradClip, NormIsOverAllGradientsAndSkipsParametersWithout) {
  Tensor a = Tensor::from({2}, {0, 0}).set_requires_grad(true);
  Tensor b = Tensor::from({1}, {0}).set_requires_grad(true);
  Tensor c = Tensor::from({1}, {0}).set_requires_grad(true);  // no gradient
  a.set_grad(Tensor::from({2}, {3, 4}));
  b.set_grad(Tensor::from({1}, {12}));
  std::vector<Tensor> params{a, b, c};
  EXPECT_DOUBLE_EQ(clip_grad_norm(params, 100.0), 13.0);
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{3, 4}));  // below max_norm: untouched
  EXPECT_DOUBLE_EQ(clip_grad_norm(params, 6.5), 13.0);
  const float s = float(6.5 / (13.0 + 1e-6));
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{3 * s, 4 * s}));
  EXPECT_EQ(b.grad().to_vector(), (std::vector<float>{12 * s}));
  EXPECT_FALSE(c.grad().defined());
  EXPECT_NEAR(grad_norm(params), 6.5, 1e-5);
  std::vector<Tensor> none{c};
  EXPECT_EQ(clip_grad_norm(none, 1.0), 0.0);
}

TEST(GradClip, NormDoesNotDependOnTheThreadCount) {
  Tensor p = Tensor::zeros({300001}).set_requires_grad(true);
  p.set_grad(random_tensor({300001}, 7));
  std::vector<Tensor> params{p};
  long double exact = 0;
  for (float g : p.grad().to_vector()) exact += (long double)g * g;
  const int threads = max_threads();
  set_max_threads(1);
  const double one = grad_norm(params);
  set_max_threads(std::max(2, threads));
  const double many = grad_norm(params);
  set_max_threads(threads);
  EXPECT_EQ(one, many);
  EXPECT_NEAR(one, std::sqrt(double(exact)), 1e-12 * one);
}

TEST(GradClip, NonFiniteNormLeavesGradientsAlone) {
  Tensor p = Tensor::zeros({3}).set_requires_grad(true);
  p.set_grad(Tensor::from({3}, {1, NAN, 2}));
  std::vector<Tensor> params{p};
  EXPECT_TRUE(std::isnan(clip_grad_norm(params, 1.0)));
  EXPECT_EQ(p.grad().to_vector()[2], 2.0f);
  expect_error([&] { clip_grad_norm(params, -1.0); }, "max_norm must be >= 0");
}

}  // namespace
}  // namespace glm4
