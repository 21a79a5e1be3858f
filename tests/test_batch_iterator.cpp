// Batching: the platform-independent shuffle, epochs and resumable cursors, right padding, and
// the packed layout (positions, segment starts, labels at example boundaries).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "base/check.h"
#include "dataset/batch_iterator.h"
#include "tests/support/expect_error.h"

namespace glm4 {
namespace {

using glm4::testing::expect_error;

// Example i has `len` tokens with ids 100*i + t; its labels copy the ids except every third.
Example make(int64_t i, int64_t len) {
  Example ex;
  for (int64_t t = 0; t < len; ++t) {
    ex.ids.push_back(int32_t(100 * i + t));
    ex.labels.push_back(t % 3 == 2 ? kIgnoreLabel : int32_t(100 * i + t));
  }
  return ex;
}

std::vector<Example> make_all(const std::vector<int64_t>& lengths) {
  std::vector<Example> out;
  for (size_t i = 0; i < lengths.size(); ++i) out.push_back(make(int64_t(i), lengths[i]));
  return out;
}

// --- shuffling ---

TEST(Shuffle, TheEngineIsTheStandardsMt19937_64) {
  std::mt19937_64 rng;  // [rand.predef]: the 10000th output of the default engine
  rng.discard(9999);
  EXPECT_EQ(rng(), 9981545732273789042ull);
}

TEST(Shuffle, UniformBelowStaysInRangeAndHitsEveryValueEvenly) {
  std::mt19937_64 rng(3);
  for (uint64_t bound : {1ull, 2ull, 7ull, 1000000007ull, (1ull << 63) + 5})
    for (int i = 0; i < 1000; ++i) EXPECT_LT(uniform_below(rng, bound), bound);
  std::vector<int> counts(6, 0);
  for (int i = 0; i < 60000; ++i) ++counts[uniform_below(rng, 6)];
  for (int c : counts) EXPECT_NEAR(c, 10000, 500);
}

TEST(Shuffle, OrderIsTheDocumentedFisherYatesOverRawEngineOutput) {
  const uint64_t seed = 1234;
  for (int64_t epoch : {0, 1, 5}) {
    std::vector<int64_t> want(17);
    std::iota(want.begin(), want.end(), 0);
    std::mt19937_64 rng(epoch_seed(seed, epoch));
    for (int64_t i = 16; i >= 1; --i) {
      const uint64_t bound = uint64_t(i) + 1;
      uint64_t x;
      do x = rng();
      while (x < (0 - bound) % bound);
      std::swap(want[size_t(i)], want[size_t(x % bound)]);
    }
    EXPECT_EQ(shuffled_order(17, seed, epoch), want) << "epoch " << epoch;
  }
}

TEST(Shuffle, OrdersArePermutationsThatDependOnSeedAndEpoch) {
  const auto a = shuffled_order(50, 7, 0);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(50);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  EXPECT_EQ(shuffled_order(50, 7, 0), a);
  EXPECT_NE(shuffled_order(50, 7, 1), a);
  EXPECT_NE(shuffled_order(50, 8, 0), a);
  EXPECT_NE(epoch_seed(7, 0), epoch_seed(7, 1));
  EXPECT_EQ(shuffled_order(1, 7, 0), (std::vector<int64_t>{0}));
  EXPECT_TRUE(shuffled_order(0, 7, 0).empty());
}

// --- epochs and cursors ---

std::vector<int32_t> first_ids(const Batch& b) {  // the first token of each row
  std::vector<int32_t> out;
  for (int64_t r = 0; r < b.B; ++r) out.push_back(b.input_ids[size_t(r * b.T)]);
  return out;
}

TEST(BatchIterator, EachEpochUsesDistinctExamplesAndReshuffles) {
  auto examples = make_all({3, 4, 5, 6, 7, 3, 4, 5, 6, 7});
  BatchIterator it(examples, {.batch_size = 3, .seed = 11});
  EXPECT_EQ(it.batches_per_epoch(), 3);  // 10 / 3, the remainder is dropped
  std::vector<std::vector<int32_t>> epochs(2);
  for (int e = 0; e < 2; ++e)
    for (int k = 0; k < 3; ++k) {
      Batch b = it.next();
      EXPECT_EQ(b.B, 3);
      for (int32_t id : first_ids(b)) epochs[size_t(e)].push_back(id);
    }
  EXPECT_EQ(it.cursor(), (DataCursor{1, 3}));
  for (auto& ids : epochs) EXPECT_EQ(std::set<int32_t>(ids.begin(), ids.end()).size(), 9u);
  EXPECT_NE(epochs[0], epochs[1]);
  it.next();
  EXPECT_EQ(it.cursor(), (DataCursor{2, 1}));
}

TEST(BatchIterator, ARestoredCursorReplaysExactlyTheSameBatches) {
  auto examples = make_all({3, 9, 4, 2, 8, 5, 7, 6, 1, 4, 3});
  for (bool pack : {false, true}) {
    BatchOptions o{.batch_size = 2, .max_seq_length = 10, .pack = pack, .seed = 5};
    BatchIterator a(examples, o);
    std::vector<Batch> seen;
    DataCursor saved;
    for (int k = 0; k < 12; ++k) {  // crosses epoch boundaries
      if (k == 4) saved = a.cursor();
      seen.push_back(a.next());
    }
    BatchIterator b(examples, o);
    b.set_cursor(saved);
    for (int k = 4; k < 12; ++k) {
      Batch x = b.next();
      EXPECT_EQ(x.input_ids, seen[size_t(k)].input_ids) << "pack " << pack << " batch " << k;
      EXPECT_EQ(x.labels, seen[size_t(k)].labels);
      EXPECT_EQ(x.seg_start, seen[size_t(k)].seg_start);
    }
    EXPECT_EQ(b.cursor(), a.cursor());
  }
}

TEST(BatchIterator, WithoutShuffleOrderIsTheFileOrderAndLastBatchCanBeKept) {
  auto examples = make_all({2, 2, 2, 2, 2});
  BatchIterator it(examples, {.batch_size = 2, .shuffle = false, .drop_last = false});
  EXPECT_EQ(it.batches_per_epoch(), 3);
  EXPECT_EQ(first_ids(it.next()), (std::vector<int32_t>{0, 100}));
  EXPECT_EQ(first_ids(it.next()), (std::vector<int32_t>{200, 300}));
  Batch last = it.next();
  EXPECT_EQ(last.B, 1);
  EXPECT_EQ(first_ids(last), (std::vector<int32_t>{400}));
  EXPECT_EQ(first_ids(it.next()), (std::vector<int32_t>{0, 100}));  // epoch 1, same order
}

TEST(BatchIterator, ErrorsAreExplained) {
  auto examples = make_all({2, 3, 12});
  expect_error([&] { BatchIterator(examples, {.max_seq_length = 10}); },
               "example 2 has 12 tokens, more than max_seq_length 10");
  auto few = make_all({2, 3});
  expect_error([&] { BatchIterator(few, {.batch_size = 3}); },
               "the data set has 2 examples, fewer than batch_size 3");
  expect_error([&] { BatchIterator(few, {.batch_size = 0}); }, "batch_size must be > 0");
  std::vector<Example> none;
  expect_error([&] { BatchIterator(none, {}); }, "the data set has no examples");
  BatchIterator it(few, {.batch_size = 1});
  expect_error([&] { it.set_cursor({0, 3}); }, "data cursor position 3 is past the 2 batches");
  expect_error([&] { it.set_cursor({-1, 0}); }, "is negative");
  std::vector<Example> broken{Example{{1, 2}, {1}}};
  expect_error([&] { BatchIterator(broken, {}); }, "example 0 has 2 ids and 1 labels");
}

// --- layouts ---

TEST(Batch, RightPaddingIsNeverATarget) {
  auto examples = make_all({3, 5, 2});
  BatchIterator it(examples, {.batch_size = 3, .shuffle = false, .pad_id = 77});
  Batch b = it.next();
  ASSERT_EQ(b.B, 3);
  ASSERT_EQ(b.T, 5);
  EXPECT_EQ(b.lengths, (std::vector<int32_t>{3, 5, 2}));
  EXPECT_TRUE(b.seg_start.empty());
  int64_t targets = 0;
  for (int64_t r = 0; r < 3; ++r) {
    const Example& ex = examples[size_t(r)];
    for (int64_t t = 0; t < b.T; ++t) {
      const size_t i = size_t(r * b.T + t);
      EXPECT_EQ(b.positions[i], t);
      if (t < int64_t(ex.ids.size())) {
        EXPECT_EQ(b.input_ids[i], ex.ids[size_t(t)]);
        EXPECT_EQ(b.labels[i], t == 0 ? kIgnoreLabel : ex.labels[size_t(t)]);
      } else {
        EXPECT_EQ(b.input_ids[i], 77);
        EXPECT_EQ(b.labels[i], kIgnoreLabel) << "padding at row " << r << " t " << t;
      }
    }
    targets += count_targets(ex);
  }
  EXPECT_EQ(b.target_tokens, targets);
  EXPECT_EQ(b.target_tokens, 1 + 3 + 1);  // t = 1..len-1 minus every t % 3 == 2
  AttentionMask m = attention_mask(b);
  int64_t lo, hi;
  m.range(2, 1, b.T, &lo, &hi);  // the last real token of row 2 sees [0, 2)
  EXPECT_EQ(lo, 0);
  EXPECT_EQ(hi, 2);
  m.range(2, 3, b.T, &lo, &hi);  // a padding query sees nothing
  EXPECT_EQ(lo, hi);
}

TEST(Batch, PackingConcatenatesWholeExamplesWithRestartingPositions) {
  auto examples = make_all({4, 3, 5, 2, 6});
  BatchIterator it(
      examples,
      {.batch_size = 3, .max_seq_length = 8, .pack = true, .shuffle = false, .pad_id = 77});
  // Greedy in order: [0, 1] (7 tokens), [2, 3] (7), [4] (6).
  EXPECT_EQ(it.rows(), (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}, {4}}));
  Batch b = it.next();
  ASSERT_EQ(b.B, 3);
  ASSERT_EQ(b.T, 7);
  EXPECT_EQ(b.lengths, (std::vector<int32_t>{7, 7, 6}));
  int64_t targets = 0;
  for (size_t r = 0; r < 3; ++r) {
    int64_t t = 0;
    for (int64_t e : it.rows()[r]) {
      const Example& ex = examples[size_t(e)];
      const int64_t start = t;
      for (size_t k = 0; k < ex.ids.size(); ++k, ++t) {
        const size_t i = r * size_t(b.T) + size_t(t);
        EXPECT_EQ(b.input_ids[i], ex.ids[k]);
        EXPECT_EQ(b.positions[i], int32_t(k));
        EXPECT_EQ(b.seg_start[i], int32_t(start));
        // No example learns to predict its first token from the previous example.
        EXPECT_EQ(b.labels[i], k == 0 ? kIgnoreLabel : ex.labels[k]) << "row " << r << " t " << t;
      }
      targets += count_targets(ex);
    }
    for (; t < b.T; ++t) {
      const size_t i = r * size_t(b.T) + size_t(t);
      EXPECT_EQ(b.input_ids[i], 77);
      EXPECT_EQ(b.labels[i], kIgnoreLabel);
      EXPECT_EQ(b.seg_start[i], b.lengths[r]);
    }
  }
  EXPECT_EQ(b.target_tokens, targets);
  // Attention stays inside each example: row 0 holds example 0 at [0, 4), example 1 at [4, 7).
  AttentionMask m = attention_mask(b);
  int64_t lo, hi;
  m.range(0, 4, b.T, &lo, &hi);
  EXPECT_EQ(lo, 4);
  EXPECT_EQ(hi, 5);
  m.range(0, 6, b.T, &lo, &hi);
  EXPECT_EQ(lo, 4);
  EXPECT_EQ(hi, 7);
  m.range(0, 3, b.T, &lo, &hi);
  EXPECT_EQ(lo, 0);
  EXPECT_EQ(hi, 4);
  m.range(2, 6, b.T, &lo, &hi);  // padding
  EXPECT_EQ(lo, hi);
}

TEST(Batch, ShuffledPackingUsesEveryExampleOncePerEpochWithinTheRowWidth) {
  std::vector<int64_t> lengths;
  for (int i = 0; i < 40; ++i) lengths.push_back(1 + (i * 7) % 16);
  auto examples = make_all(lengths);
  BatchOptions o{
      .batch_size = 1, .max_seq_length = 16, .pack = true, .drop_last = false, .seed = 9};
  BatchIterator it(examples, o);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::multiset<int64_t> used;
    for (const auto& row : it.rows()) {
      int64_t len = 0;
      for (int64_t e : row) {
        used.insert(e);
        len += lengths[size_t(e)];
      }
      EXPECT_LE(len, 16);
    }
    EXPECT_EQ(used.size(), 40u);
    EXPECT_EQ(std::set<int64_t>(used.begin(), used.end()).size(), 40u);
    const int64_t batches = it.batches_per_epoch();
    EXPECT_LT(batches, 40);  // rows do hold several examples
    for (int64_t k = 0; k < batches; ++k) it.next();
    it.next();  // into the next epoch
  }
}

}  // namespace
}  // namespace glm4
