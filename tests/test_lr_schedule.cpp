// The learning-rate schedule (train/lr_schedule.h): warmup, cosine decay to min_lr, validation.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "tests/support/expect_error.h"
#include "train/lr_schedule.h"

namespace glm4 {
namespace {

using glm4::testing::expect_error;

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

}  // namespace
}  // namespace glm4
