// Training building blocks apart from data: learning-rate schedule, gradient clipping and the
// AdamW bookkeeping (the numbers against torch are in test_adamw.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "base/check.h"
#include "base/parallel.h"
#include "train/adamw.h"
#include "train/grad_clip.h"
#include "train/lr_schedule.h"
#include "tests/support/expect_error.h"
#include "tests/support/random_values.h"

namespace glm4 {
namespace {

using glm4::testing::expect_error;

Tensor random_tensor(const Shape& shape, uint32_t seed, float scale = 1.0f) {
  return Tensor::from(shape, testing::randn(size_t(shape_numel(shape)), seed, scale));
}

// --- learning-rate schedule ---

TEST(LrSchedule, WarmupRisesLinearlyFromLrOverWarmupToLr) {
  LrSchedule s{"constant", 2e-3, 4, 0, 0};
  for (int64_t i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(s.at(i), 2e-3 * double(i + 1) / 4.0) << i;
  EXPECT_DOUBLE_EQ(s.at(3), 2e-3);
  for (int64_t i = 4; i < 50; i += 7) EXPECT_DOUBLE_EQ(s.at(i), 2e-3);
}

TEST(LrSchedule, WithoutWarmupTheFirstStepUsesTheFullRate) {
  EXPECT_DOUBLE_EQ((LrSchedule{"constant", 1e-4, 0, 0, 0}).at(0), 1e-4);
  EXPECT_DOUBLE_EQ((LrSchedule{"cosine", 1e-4, 0, 10, 0}).at(0), 1e-4);
}

TEST(LrSchedule, CosineGoesFromLrAtWarmupToMinLrAtTotalSteps) {
  const double lr = 1e-3, min_lr = 1e-5;
  LrSchedule s{"cosine", lr, 10, 110, min_lr};
  EXPECT_DOUBLE_EQ(s.at(9), lr);
  EXPECT_DOUBLE_EQ(s.at(10), lr);
  EXPECT_NEAR(s.at(60), (lr + min_lr) / 2, 1e-15);  // halfway through the decay
  EXPECT_NEAR(s.at(35), min_lr + (lr - min_lr) * (1 + std::cos(std::numbers::pi / 4)) / 2, 1e-15);
  EXPECT_DOUBLE_EQ(s.at(110), min_lr);
  EXPECT_DOUBLE_EQ(s.at(500), min_lr);  // past the end it stays at min_lr
  EXPECT_GT(s.at(109), min_lr);
  for (int64_t i = 10; i < 120; ++i) EXPECT_LE(s.at(i + 1), s.at(i)) << i;
}

TEST(LrSchedule, ValidationNamesTheField) {
  expect_error([] { (LrSchedule{"linear", 1e-3, 0, 10, 0}).validate(); }, "unknown kind 'linear'");
  expect_error([] { (LrSchedule{"constant", -1e-3, 0, 10, 0}).validate(); }, "learning_rate");
  expect_error([] { (LrSchedule{"constant", 1e-3, -1, 10, 0}).validate(); }, "warmup must be >= 0");
  expect_error([] { (LrSchedule{"constant", 1e-3, 0, -5, 0}).validate(); }, "total_steps must be");
  expect_error([] { (LrSchedule{"constant", 1e-3, 0, 10, -1e-6}).validate(); }, "min_lr must be");
  expect_error(
      [] {
        (LrSchedule{"cosine", 1e-3, 0, 10, 1e-2}).validate();
      },
      "min_lr (0.01) exceeds");
  expect_error([] { (LrSchedule{"cosine", 1e-3, 20, 10, 0}).validate(); }, "warmup (20) exceeds");
  expect_error([] { (LrSchedule{"cosine", 1e-3, 0, 0, 0}).validate(); }, "total_steps > 0");
  expect_error([] { (LrSchedule{"constant", 1e-3, 0, 0, 0}).at(-1); }, "step must be >= 0");
  EXPECT_NO_THROW((LrSchedule{"constant", 1e-3, 3, 0, 0}).validate());
}

// --- gradient clipping ---

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

// --- AdamW bookkeeping ---

TEST(AdamW, ParallelUpdateOfALargeTensorEqualsSerialUpdatesOfItsPieces) {
  const int64_t n = 100000, pieces = 10;
  Tensor big = random_tensor({n}, 1).set_requires_grad(true);
  std::vector<std::pair<std::string, Tensor>> small;
  for (int64_t i = 0; i < pieces; ++i) {
    std::vector<float> v(big.data() + i * n / pieces, big.data() + (i + 1) * n / pieces);
    small.emplace_back(str_cat("p", i), Tensor::from({n / pieces}, v).set_requires_grad(true));
  }
  AdamW a({{"big", big}}, {});
  AdamW b(small, {});
  for (int step = 0; step < 3; ++step) {
    Tensor g = random_tensor({n}, 100 + step, 0.1f);
    big.set_grad(g);
    for (int64_t i = 0; i < pieces; ++i) {
      std::vector<float> v(g.data() + i * n / pieces, g.data() + (i + 1) * n / pieces);
      small[size_t(i)].second.set_grad(Tensor::from({n / pieces}, v));
    }
    a.step(1e-3 * (step + 1));
    b.step(1e-3 * (step + 1));
  }
  std::vector<float> joined;
  for (auto& [name, t] : small)
    for (float x : t.to_vector()) joined.push_back(x);
  EXPECT_EQ(big.to_vector(), joined);
  EXPECT_NE(big.to_vector(), random_tensor({n}, 1).to_vector());  // it did move
}

TEST(AdamW, ParametersWithoutGradientsAreNotTouched) {
  Tensor a = Tensor::from({2}, {1, 2}).set_requires_grad(true);
  Tensor b = Tensor::from({2}, {3, 4}).set_requires_grad(true);
  AdamW opt({{"a", a}, {"b", b}}, {.lr = 0.1, .weight_decay = 0.5});
  a.set_grad(Tensor::from({2}, {1, -1}));
  opt.step();
  EXPECT_EQ(b.to_vector(), (std::vector<float>{3, 4}));  // not even weight decay
  EXPECT_EQ(opt.param_steps(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(opt.step_count(), 1);
  // First step: m/(1-b1) = g, sqrt(v/(1-b2)) = |g|, so p = p(1 - lr wd) - lr sign(g) (+eps).
  EXPECT_NEAR(a.to_vector()[0], 1 * (1 - 0.05) - 0.1, 1e-6);
  EXPECT_NEAR(a.to_vector()[1], 2 * (1 - 0.05) + 0.1, 1e-6);
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

TEST(AdamW, ErrorsNameTheParameter) {
  Tensor a = Tensor::zeros({2, 3}).set_requires_grad(true);
  expect_error([&] { AdamW({{"w", a}, {"w", a}}, {}); }, "parameter name 'w' appears twice");
  expect_error([&] { AdamW({{"w", Tensor()}}, {}); }, "'w' is an undefined tensor");
  expect_error([&] { AdamW({{"w", a}}, {.beta1 = 1.0}); }, "beta1 must be in [0, 1)");
  expect_error([&] { AdamW({{"w", a}}, {.beta2 = -0.1}); }, "beta2 must be in [0, 1)");
  expect_error([&] { AdamW({{"w", a}}, {.eps = -1}); }, "eps must be >= 0");
  expect_error([&] { AdamW({{"w", a}}, {.weight_decay = -1}); }, "weight_decay must be >= 0");
  AdamW opt({{"w", a}}, {});
  expect_error([&] { opt.step(-1.0); }, "learning rate must be finite and >= 0");
  a.set_grad(Tensor::zeros({3, 2}));
  expect_error([&] { opt.step(1e-3); }, "gradient of 'w' has shape (3,2), parameter has (2,3)");
  expect_error(
      [&] {
        opt.load_state(1, {Tensor::zeros({6})}, {Tensor::zeros({2, 3})});
      },
      "exp_avg of 'w' has shape (6), parameter has (2,3)");
  expect_error(
      [&] {
        opt.load_state(1, {Tensor::zeros({2, 3})}, {Tensor::zeros({3, 2})});
      },
      "exp_avg_sq of 'w' has shape (3,2)");
  expect_error([&] { opt.load_state(1, {}, {}); }, "1 parameters but 0 exp_avg");
  expect_error(
      [&] {
        opt.load_state(1, {Tensor::zeros({2, 3})}, {Tensor::zeros({2, 3})}, {5});
      },
      "step 5 of 'w' is outside [0, 1]");
}

TEST(AdamW, LoadStateCopiesValuesAndSteps) {
  Tensor a = Tensor::zeros({2}).set_requires_grad(true);
  AdamW opt({{"a", a}}, {});
  opt.load_state(7, {Tensor::from({2}, {1, 2})}, {Tensor::from({2}, {3, 4})});
  EXPECT_EQ(opt.step_count(), 7);
  EXPECT_EQ(opt.param_steps(), (std::vector<int64_t>{7}));
  EXPECT_EQ(opt.exp_avg()[0].to_vector(), (std::vector<float>{1, 2}));
  EXPECT_EQ(opt.exp_avg_sq()[0].to_vector(), (std::vector<float>{3, 4}));
}

}  // namespace
}  // namespace glm4
