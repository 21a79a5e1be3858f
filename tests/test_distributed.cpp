// The pieces of data-parallel training that need no second process: the rule that splits a
// step's rows over the ranks, AdamW updating only owned elements (ZeRO stage 1), the backward
// hook that says when a gradient is complete, and the group of one process.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "autograd/node.h"
#include "base/check.h"
#include "autograd/ops.h"
#include "autograd/recompute.h"
#include "dataset/step_split.h"
#include "train/adamw.h"
#include "train/distributed.h"
#include "train/grad_reducer.h"
#include "train/param_sync.h"
#include "tests/support/random_values.h"

namespace glm4 {
namespace {

Tensor random_tensor(const Shape& shape, uint32_t seed, float scale = 1.0f) {
  return Tensor::from(shape, testing::randn(size_t(shape_numel(shape)), seed, scale));
}

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

// ZeRO stage 1: optimizers owning complementary pieces of each parameter, put together, make the
// update of one optimizer owning all, bit for bit; load_state keeps each one's piece.
TEST(ShardedAdamW, PiecesMakeTheWholeUpdate) {
  const Shape shape{7, 9};
  const int64_t n = 63;
  Tensor whole = random_tensor(shape, 1).set_requires_grad(true);
  Tensor other = random_tensor({5}, 2).set_requires_grad(true);
  std::vector<Tensor> copy_a{whole.clone().set_requires_grad(true), other.clone().set_requires_grad(true)};
  std::vector<Tensor> copy_b{whole.clone().set_requires_grad(true), other.clone().set_requires_grad(true)};
  AdamWOptions o{.lr = 1e-2, .weight_decay = 0.1};
  AdamW full({{"w", whole}, {"o", other}}, o);
  AdamW a({{"w", copy_a[0]}, {"o", copy_a[1]}}, o, {{0, 20}, {0, 5}});
  AdamW b({{"w", copy_b[0]}, {"o", copy_b[1]}}, o, {{20, n}, {5, 5}});
  EXPECT_EQ(a.exp_avg()[0].shape(), (Shape{20}));
  EXPECT_EQ(a.exp_avg()[1].shape(), (Shape{5}));  // all of it: the parameter's shape
  EXPECT_EQ(b.exp_avg()[1].shape(), (Shape{0}));
  std::vector<Tensor> originals{whole, other};
  for (int step = 0; step < 4; ++step) {
    for (int i = 0; i < 2; ++i) {
      Tensor g = random_tensor(i == 0 ? shape : Shape{5}, 10 + step * 2 + i, 0.1f);
      originals[size_t(i)].set_grad(g);
      copy_a[size_t(i)].set_grad(g.clone());
      copy_b[size_t(i)].set_grad(g.clone());
    }
    full.step(1e-2);
    a.step(1e-2);
    b.step(1e-2);
  }
  std::vector<float> joined = copy_a[0].to_vector(), tail = copy_b[0].to_vector();
  std::copy(tail.begin() + 20, tail.end(), joined.begin() + 20);
  EXPECT_EQ(joined, whole.to_vector());
  EXPECT_EQ(copy_a[1].to_vector(), other.to_vector());
  EXPECT_EQ(b.param_steps(), full.param_steps());  // an empty piece still counts its steps
  std::vector<float> m = full.exp_avg()[0].to_vector();
  EXPECT_EQ(b.exp_avg()[0].to_vector(), std::vector<float>(m.begin() + 20, m.end()));

  AdamW fresh({{"w", copy_b[0]}, {"o", copy_b[1]}}, o, {{20, n}, {5, 5}});
  fresh.load_state(full.step_count(), full.exp_avg(), full.exp_avg_sq());
  std::vector<float> v = full.exp_avg_sq()[0].to_vector();
  EXPECT_EQ(fresh.exp_avg_sq()[0].to_vector(), std::vector<float>(v.begin() + 20, v.end()));
  EXPECT_THROW(AdamW({{"w", whole}}, o, {{5, 64}}), Error);
}

// The hook fires once per trainable leaf, when its gradient already has its final value, also
// for leaves inside a recomputed block.
TEST(LeafReadyHook, FiresOnceWhenTheGradientIsComplete) {
  Tensor w1 = random_tensor({4}, 1).set_requires_grad(true);
  Tensor w2 = random_tensor({4}, 2).set_requires_grad(true);
  Tensor w3 = random_tensor({4}, 3).set_requires_grad(true);
  Tensor x = random_tensor({4}, 4);
  auto loss_of = [&] {
    Tensor h = ops::mul(x, w1);
    h = recompute([&](const std::vector<Tensor>& in) { return ops::mul(in[0], w2); }, {h});
    return ops::add(ops::sum(ops::mul(h, w3)), ops::sum(ops::mul(w1, w1)));  // w1 used twice
  };
  backward(loss_of());
  std::vector<std::vector<float>> want{w1.grad().to_vector(), w2.grad().to_vector(), w3.grad().to_vector()};
  for (Tensor* w : {&w1, &w2, &w3}) w->zero_grad();

  std::map<const TensorImpl*, int> fired;
  std::map<const TensorImpl*, std::vector<float>> at_fire;
  {
    LeafReadyHook hook([&](const TensorImpl* leaf) {
      ++fired[leaf];
      for (Tensor* w : {&w1, &w2, &w3})
        if (w->impl() == leaf) at_fire[leaf] = w->grad().to_vector();
    });
    backward(loss_of());
  }
  EXPECT_EQ(fired[w1.impl()], 1);
  EXPECT_EQ(fired[w2.impl()], 1);
  EXPECT_EQ(fired[w3.impl()], 1);
  EXPECT_EQ(at_fire[w1.impl()], want[0]);
  EXPECT_EQ(at_fire[w2.impl()], want[1]);
  EXPECT_EQ(at_fire[w3.impl()], want[2]);
  EXPECT_EQ(LeafReadyHook::current(), nullptr);
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
