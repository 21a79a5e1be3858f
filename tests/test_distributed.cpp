// The data-parallel layer without a second process (train/distributed.h, grad_reducer.h,
// param_sync.h): the group of one process and its reducer, and the parameter checksum. Ranks'
// rows: test_step_split.cpp; sharded AdamW: test_adamw.cpp; the leaf-ready hook: test_autograd.cpp;
// several processes: test_cli_mpi.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/support/random_values.h"
#include "train/distributed.h"
#include "train/grad_reducer.h"
#include "train/param_sync.h"

namespace glm4 {
namespace {

Tensor random_tensor(const Shape& shape, uint32_t seed, float scale = 1.0f) {
  return Tensor::from(shape, testing::randn(size_t(shape_numel(shape)), seed, scale));
}

TEST(SingleProcessGroup, ReducerLeavesGradientsAsTheyAre) {
  Distributed& one = single_process_group();
  EXPECT_EQ(one.size(), 1);
  EXPECT_TRUE(one.root());
  Tensor a = random_tensor({3, 5}, 1).set_requires_grad(true);
  Tensor b = random_tensor({7}, 2).set_requires_grad(true);
  GradientReducer reducer(one, {a, b}, true, 16);  // tiny buckets: one parameter each
  EXPECT_EQ(reducer.buckets(), 2);
  EXPECT_EQ(reducer.owned(0)[0].size(), 15);
  EXPECT_EQ(reducer.bytes_sent_per_step(), 0);
  a.set_grad(random_tensor({3, 5}, 3));
  std::vector<float> ga = a.grad().to_vector();
  reducer.begin();
  reducer.finish();
  EXPECT_EQ(a.grad().to_vector(), ga);
  EXPECT_FALSE(b.grad().defined());  // no rank had one
}

TEST(ParameterChecksum, SeesOneBitAndNotTheThreadCount) {
  Tensor a = random_tensor({200000}, 1);
  const uint64_t before = parameter_checksum({a});
  EXPECT_EQ(parameter_checksum({a.clone()}), before);
  a.data()[123456] = std::nextafter(a.data()[123456], 1e9f);
  EXPECT_NE(parameter_checksum({a}), before);
}

}  // namespace
}  // namespace glm4
