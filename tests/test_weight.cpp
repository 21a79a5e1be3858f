// Weight storage (autograd/weight.h): rounding once to the stored dtype, exact widening, views
// that keep their owner alive, alignment, the live-byte count, bad shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "autograd/weight.h"
#include "base/check.h"

namespace glm4 {
namespace {

TEST(Weight, FromF32RoundsOnceToStoredDtype) {
  std::vector<float> v = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -2.5f, 1e-6f, 70000.0f, 0.1f};
  Weight b = Weight::from_f32(v.data(), 2, 3, DType::BF16);
  Weight h = Weight::from_f32(v.data(), 2, 3, DType::F16);
  Weight f = Weight::from_f32(v.data(), 2, 3);
  ASSERT_EQ(b.bytes(), 12u);
  ASSERT_EQ(f.bytes(), 24u);
  std::vector<float> row(3);
  for (int64_t r = 0; r < 2; ++r) {
    b.row_to_f32(r, row.data());
    for (int c = 0; c < 3; ++c) EXPECT_EQ(row[c], bf16_to_f32(f32_to_bf16(v[r * 3 + c])));
    h.row_to_f32(r, row.data());
    for (int c = 0; c < 3; ++c) EXPECT_EQ(row[c], f16_to_f32(f32_to_f16(v[r * 3 + c])));
    f.row_to_f32(r, row.data());
    for (int c = 0; c < 3; ++c) EXPECT_EQ(row[c], v[r * 3 + c]);
  }
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  EXPECT_THROW(b.row_to_f32(2, row.data()), Error);
}

// Widening covers every bf16 / f16 bit pattern (the vector and the scalar paths).
TEST(Weight, WideningIsExactForEveryValue) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = uint16_t(i);
  for (DType dt : {DType::BF16, DType::F16}) {
    Weight w = Weight::copy_of(dt, all.data(), 1, 65536);
    std::vector<float> out(65536);
    w.to_f32(out.data());
    for (uint32_t i = 0; i < 65536; ++i) {
      float want = dt == DType::BF16 ? bf16_to_f32(uint16_t(i)) : f16_to_f32(uint16_t(i));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(out[i])) << i;
      } else {
        EXPECT_EQ(out[i], want) << dtype_name(dt) << " " << i;
      }
    }
  }
}

TEST(Weight, ViewKeepsOwnerAliveAndCopiesShareIt) {
  bool freed = false;
  auto* raw = new std::vector<uint16_t>(6, f32_to_bf16(1.5f));
  const void* data = raw->data();
  std::shared_ptr<const void> owner(raw, [&freed](const std::vector<uint16_t>* p) {
    freed = true;
    delete p;
  });
  const size_t live = weight_bytes_live();
  {
    Weight copy;
    {
      Weight w = Weight::view(DType::BF16, data, 2, 3, owner);
      owner.reset();
      EXPECT_FALSE(freed);
      EXPECT_EQ(w.data(), data);
      EXPECT_FALSE(w.owns_buffer());
      EXPECT_EQ(weight_bytes_live(), live);  // views are not counted
      copy = w;
    }
    EXPECT_FALSE(freed);
    std::vector<float> row(3);
    copy.row_to_f32(1, row.data());
    EXPECT_EQ(row[2], 1.5f);
  }
  EXPECT_TRUE(freed);
}

TEST(Weight, ViewRejectsMisalignedData) {
  alignas(4) uint8_t bytes[16] = {};
  EXPECT_THROW(Weight::view(DType::BF16, bytes + 1, 1, 2, nullptr), Error);
  EXPECT_THROW(Weight::view(DType::F32, bytes + 2, 1, 2, nullptr), Error);
  EXPECT_NO_THROW(Weight::view(DType::F32, bytes + 4, 1, 2, nullptr));
}

TEST(Weight, LiveBytesCountOwnedBuffers) {
  const size_t before = weight_bytes_live();
  std::vector<float> v(35, 0.5f);
  {
    Weight a = Weight::from_f32(v.data(), 5, 7, DType::BF16);
    EXPECT_EQ(weight_bytes_live(), before + 70);
    Weight shared = a;  // no new buffer
    EXPECT_EQ(shared.data(), a.data());
    EXPECT_EQ(weight_bytes_live(), before + 70);
    Weight b = Weight::copy_of(DType::F32, v.data(), 5, 7);
    EXPECT_EQ(weight_bytes_live(), before + 70 + 140);
    std::vector<float> row(7);
    b.row_to_f32(4, row.data());
    EXPECT_EQ(row[6], 0.5f);
  }
  EXPECT_EQ(weight_bytes_live(), before);
}

TEST(Weight, RejectsBadShapes) {
  std::vector<float> v(4);
  EXPECT_THROW(Weight::from_f32(v.data(), -1, 4), Error);
  EXPECT_THROW(Weight::copy_of(DType::F32, nullptr, 2, 2), Error);
  EXPECT_NO_THROW(Weight::copy_of(DType::F32, nullptr, 0, 2));
}

}  // namespace
}  // namespace glm4
