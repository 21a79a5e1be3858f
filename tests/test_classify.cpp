// summarize (what glm4 classify reports): accuracy overall and per task, answer loss, confusion
// counts and predicted-label counts, checked on a small case computed by hand.
#include <gtest/gtest.h>

#include "base/check.h"
#include "infer/classify.h"

namespace glm4 {
namespace {

using Matrix = std::vector<std::vector<int64_t>>;

// Labels A, B, C; four records, three predicted right.
std::vector<Classification> four_results() {
  return {{{-0.5, -1.5, -2.0}, 0},     // answer A: right
          {{-0.25, -1.0, -3.0}, 0},    // answer B: predicted A
          {{-4.0, -2.0, -0.5}, 2},     // answer C: right
          {{-3.0, -0.75, -1.25}, 1}};  // answer B: right
}

TEST(ClassifySummary, AccuracyLossAndConfusionByHand) {
  const std::vector<RecordAnswer> answers = {{0, "x", 2}, {1, "x", 1}, {2, "y", 2}, {1, "", 3}};
  const ClassifyReport r = summarize(four_results(), answers, 3);
  ASSERT_TRUE(r.with_answers);
  EXPECT_DOUBLE_EQ(r.accuracy, 0.75);
  // The record without a task counts overall only.
  EXPECT_EQ(r.accuracy_by_task, (std::map<std::string, double>{{"x", 0.5}, {"y", 1.0}}));
  // -log p(answer) summed, over the answer tokens.
  EXPECT_DOUBLE_EQ(r.answer_loss, (0.5 + 1.0 + 0.5 + 0.75) / 8);
  EXPECT_EQ(r.confusion, (Matrix{{1, 0, 0}, {1, 1, 0}, {0, 0, 1}}));  // [answer][predicted]
  EXPECT_EQ(r.predicted, (std::vector<int64_t>{2, 1, 1}));
}

TEST(ClassifySummary, WithoutAnswersOnlyCountsPredictions) {
  const ClassifyReport r = summarize(four_results(), std::vector<RecordAnswer>(4), 3);
  EXPECT_FALSE(r.with_answers);
  EXPECT_EQ(r.predicted, (std::vector<int64_t>{2, 1, 1}));
  EXPECT_TRUE(r.confusion.empty());
  EXPECT_TRUE(r.accuracy_by_task.empty());
}

TEST(ClassifySummary, RejectsMismatchedInputs) {
  const std::vector<RecordAnswer> some = {{0, "", 1}, {-1, "", 0}, {2, "", 1}, {1, "", 1}};
  const std::vector<RecordAnswer> none3(3), none4(4);
  EXPECT_THROW(summarize(four_results(), some, 3), Error);   // answers in some records only
  EXPECT_THROW(summarize(four_results(), none3, 3), Error);  // a record short
  EXPECT_THROW(summarize(four_results(), none4, 2), Error);  // 3 log-probabilities, 2 labels
}

}  // namespace
}  // namespace glm4
