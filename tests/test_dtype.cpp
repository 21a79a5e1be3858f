#include <gtest/gtest.h>

#include <cmath>

#include "base/dtype.h"

namespace glm4 {

TEST(DType, Bf16RoundTripsEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = bf16_to_f32(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f))));
      continue;
    }
    EXPECT_EQ(f32_to_bf16(f), h) << h;
  }
}

TEST(DType, F16RoundTripsEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    EXPECT_EQ(f32_to_f16(f), h) << h;
  }
}

// Rounding to nearest even: a value halfway between two representable numbers goes to the even one.
TEST(DType, RoundsHalfwayToEven) {
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), f32_to_bf16(1.0f));  // halfway, 1.0 is even
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f + 1.0f / 2048)), 1.0f);
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f + 3.0f / 2048)), 1.0f + 4.0f / 2048);
  EXPECT_EQ(f16_to_f32(f32_to_f16(3.0e-8f)), std::ldexp(1.0f, -24));  // 0.503 units rounds up to 1
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(70000.0f))));
}

}  // namespace glm4
