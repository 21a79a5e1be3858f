// The vectorised exp of the fused kernels against std::exp: within 2 ulp over the whole range
// where exp is a normal float, the right values at the edges, and exp_shifted's sum.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "autograd/kernels/vec_math.h"

namespace glm4 {
namespace {

std::vector<float> vec_exp(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  kernels::exp_shifted(x.data(), 0.0f, out.data(), int64_t(x.size()));
  return out;
}

int64_t ulp_distance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::abs(int64_t(ia) - int64_t(ib));
}

TEST(VecExp, WithinTwoUlpOfTheCorrectlyRoundedExp) {
  std::vector<float> x;
  for (double v = -87.3; v <= 88.7; v += 0.00173) x.push_back(float(v));
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> small(-1e-3f, 1e-3f);
  for (int i = 0; i < 10000; ++i) x.push_back(small(rng));
  while (x.size() % 37) x.push_back(1.5f);  // a tail shorter than a vector
  std::vector<float> y = vec_exp(x);
  int64_t worst = 0;
  float at = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    float want = float(std::exp(double(x[i])));
    int64_t d = ulp_distance(y[i], want);
    if (d > worst) worst = d, at = x[i];
  }
  EXPECT_LE(worst, 2) << "at x = " << at;
}

TEST(VecExp, EdgesAndSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity(),
              nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {
      0.0f,  -inf, inf,  nan,   -100.0f, -87.5f, 89.0f, 1.0f,
      -1.0f, 0.5f, 2.0f, -3.0f, 4.0f,    -5.0f,  6.0f,  7.0f};  // one full AVX-512 vector
  std::vector<float> y = vec_exp(x);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], inf);
  EXPECT_TRUE(std::isnan(y[3]));
  EXPECT_EQ(y[4], 0.0f);
  EXPECT_EQ(y[5], 0.0f);  // below FLT_MIN: flushed to zero
  EXPECT_EQ(y[6], inf);
  EXPECT_LE(ulp_distance(y[7], float(std::exp(1.0))), 2);
}

TEST(VecExp, ShiftedExpAndItsSum) {
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 97) * 0.25f - 10.0f;
  std::vector<float> out(x.size());
  double sum = kernels::exp_shifted(x.data(), 3.0f, out.data(), int64_t(x.size()));
  double want = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double e = std::exp(double(x[i]) - 3.0);
    EXPECT_NEAR(out[i], e, 3e-7 * e) << i;
    want += e;
  }
  EXPECT_NEAR(sum, want, 1e-6 * want);
  // In place, as the cross-entropy uses it.
  double again = kernels::exp_shifted(x.data(), 3.0f, x.data(), int64_t(x.size()));
  EXPECT_EQ(again, sum);
  EXPECT_EQ(x, out);
}

}  // namespace
}  // namespace glm4
