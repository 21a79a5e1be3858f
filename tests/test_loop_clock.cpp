// base/parallel.h's loop_clock: the benchmarks read from it how much of a decode runs on one
// thread between parallel loops, so it must count each loop started outside any other once, and
// neither the loops nested in one nor those small enough to run inline.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

#include "base/parallel.h"

namespace glm4 {
namespace {

TEST(LoopClock, CountsEachOuterLoopOnce) {
  const LoopClock before = loop_clock();
  std::atomic<int64_t> visited{0};
  for (int i = 0; i < 3; ++i)
    parallel_for(64, 1, [&](int64_t lo, int64_t hi) { visited += hi - lo; });
  const LoopClock after = loop_clock();
  EXPECT_EQ(visited.load(), 3 * 64);
  EXPECT_EQ(after.loops - before.loops, 3);
  EXPECT_GE(after.seconds, before.seconds);
}

TEST(LoopClock, LeavesOutNestedAndInlineLoops) {
  const LoopClock before = loop_clock();
  std::atomic<int64_t> visited{0};
  parallel_for(8, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)  // nested: counted as part of the outer loop
      parallel_for(32, 1, [&](int64_t a, int64_t b) { visited += b - a; });
  });
  parallel_for(4, 16, [&](int64_t lo, int64_t hi) { visited += hi - lo; });  // inline: n <= grain
  EXPECT_EQ(visited.load(), 8 * 32 + 4);
  EXPECT_EQ(loop_clock().loops - before.loops, 1);
}

TEST(LoopClock, AThrowingChunkLeavesLaterLoopsCounted) {
  EXPECT_THROW(parallel_for(16, 1, [](int64_t, int64_t) { throw std::runtime_error("chunk"); }),
               std::runtime_error);
  const LoopClock before = loop_clock();
  parallel_for(16, 1, [](int64_t, int64_t) {});
  EXPECT_EQ(loop_clock().loops - before.loops, 1);
}

}  // namespace
}  // namespace glm4
