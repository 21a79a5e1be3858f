// How a step's batches are split over the ranks (dataset/step_split.h): every row goes to exactly
// one rank, in order.
#include <gtest/gtest.h>

#include "base/check.h"
#include "dataset/step_split.h"

namespace glm4 {
namespace {

TEST(RankRows, OneRankGetsTheStepsBatchesWhole) {
  EXPECT_EQ(rank_rows({4, 4, 2}, 0, 1), (std::vector<RowSlice>{{0, 0, 4}, {1, 0, 4}, {2, 0, 2}}));
}

TEST(RankRows, RanksDividingTheBatchCountGetWholeBatches) {
  EXPECT_EQ(rank_rows({3, 3, 3, 3}, 0, 2), (std::vector<RowSlice>{{0, 0, 3}, {1, 0, 3}}));
  EXPECT_EQ(rank_rows({3, 3, 3, 3}, 1, 2), (std::vector<RowSlice>{{2, 0, 3}, {3, 0, 3}}));
}

TEST(RankRows, EveryRowGoesToExactlyOneRankInOrder) {
  for (int ranks = 1; ranks <= 7; ++ranks) {
    std::vector<int64_t> batches{5, 5, 3};
    std::vector<std::pair<int64_t, int64_t>> seen;  // (batch, row)
    for (int r = 0; r < ranks; ++r)
      for (const RowSlice& s : rank_rows(batches, r, ranks)) {
        EXPECT_LT(s.begin, s.end);
        for (int64_t i = s.begin; i < s.end; ++i) seen.push_back({s.batch, i});
      }
    std::vector<std::pair<int64_t, int64_t>> all;
    for (size_t b = 0; b < batches.size(); ++b)
      for (int64_t i = 0; i < batches[b]; ++i) all.push_back({int64_t(b), i});
    EXPECT_EQ(seen, all) << ranks << " ranks";
  }
}

TEST(RankRows, MoreRanksThanRowsLeavesSomeEmpty) {
  EXPECT_TRUE(rank_rows({1}, 0, 2).empty());
  EXPECT_EQ(rank_rows({1}, 1, 2), (std::vector<RowSlice>{{0, 0, 1}}));
  EXPECT_THROW(rank_rows({1}, 2, 2), Error);
}

}  // namespace
}  // namespace glm4
