// The tape: accumulation into leaves, no-grad mode, frozen tensors, errors, and the hook that says
// when a leaf's gradient is complete (checkpointing: test_recompute.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/recompute.h"
#include "base/check.h"
#include "tests/support/expect_error.h"
#include "tests/support/gradcheck.h"
#include "tests/support/random_values.h"

namespace glm4 {
namespace {

Tensor random_tensor(const Shape& shape, uint32_t seed, float scale = 1.0f) {
  return Tensor::from(shape, testing::randn(size_t(shape_numel(shape)), seed, scale));
}

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = Tensor::from({3}, {1, 2, 3}).set_requires_grad(true);
  backward(ops::sum(ops::mul(x, x)));
  backward(ops::sum(ops::scale(x, 3.0f)));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{5, 7, 9}));  // 2x + 3
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, ATensorUsedTwiceGetsBothContributions) {
  Tensor x = Tensor::from({2}, {1, -2}).set_requires_grad(true);
  Tensor y = ops::add(x, x);
  backward(ops::sum(ops::mul(y, x)));  // sum(2 x^2) -> 4x
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{4, -8}));
}

// An expert's gather returns its own rows of the gradient; the engine adds them in place. The
// sums must be those of full-size gradients, bit for bit, in the same order.
TEST(Autograd, RowGradientsOfGathersSumLikeFullSizeOnes) {
  Tensor x = testing::random_tensor({6, 5}, 3).set_requires_grad(true);
  const std::vector<std::vector<int64_t>> rows{{0, 3, 5}, {1, 3}, {2, 4, 5}};
  const Tensor seed = testing::random_tensor({6, 5}, 4);
  auto run = [&](bool increasing) {
    x.zero_grad();
    const Tensor h = ops::scale(x, 1.5f);
    std::vector<Tensor> parts;
    std::vector<std::vector<int64_t>> order;
    for (std::vector<int64_t> r : rows) {
      if (!increasing) std::reverse(r.begin(), r.end());  // the full-size path
      parts.push_back(ops::mul(ops::gather_rows(h, r), ops::gather_rows(seed, r)));
      order.push_back(r);
    }
    backward(ops::sum(ops::add(ops::scatter_add_rows(parts, order, 6), ops::mul(h, h))));
    return x.grad().to_vector();
  };
  EXPECT_EQ(run(true), run(false));
  const Tensor g = ops::gather_rows(ops::scale(x, 1.0f), rows[0]);
  EXPECT_EQ(g.grad_fn()->grad_rows, rows[0]);
}

// A node's gradient may start as a tensor someone else holds (a caller's seed, or what add's
// backward handed to both inputs). Rows added later must go into a copy.
TEST(Autograd, RowGradientsDoNotWriteIntoATensorSomeoneElseHolds) {
  Tensor x = Tensor::from({3, 2}, {1, 2, 3, 4, 5, 6}).set_requires_grad(true);
  const Tensor h = ops::scale(x, 2.0f);
  const std::vector<int64_t> rows{0, 2};
  const Tensor seed = Tensor::from({3, 2}, {1, 1, 1, 1, 1, 1});
  backward({h, ops::sum(ops::scale(ops::gather_rows(h, rows), 10.0f))}, {seed, Tensor()});
  EXPECT_EQ(seed.to_vector(), (std::vector<float>{1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{22, 22, 2, 2, 22, 22}));
  x.zero_grad();  // the same for a whole gradient added in place
  const Tensor h2 = ops::scale(x, 2.0f);
  backward({h2, ops::sum(ops::scale(h2, 10.0f))}, {seed, Tensor()});
  EXPECT_EQ(seed.to_vector(), (std::vector<float>{1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{22, 22, 22, 22, 22, 22}));
}

// Rows outside the source are refused by name, before a backward could read past it.
TEST(Autograd, GathersRefuseRowsOutsideTheirSource) {
  const Tensor source = testing::random_tensor({3, 2}, 3);
  const Tensor a = testing::random_tensor({4, 2}, 4).set_requires_grad(true);
  const std::vector<int64_t> rows{0, 3};
  testing::expect_error([&] { ops::gather_rows(source, rows); },
                        "[gather_rows] row 3 at 1 is outside [0, 3) of (3,2)");
  const Tensor x = testing::random_tensor({2, 2}, 5);
  testing::expect_error([&] { ops::linear_gathered(x, source, rows, a); },
                        "[linear_gathered] row 3 at 1 is outside [0, 3) of (3,2)");
}

TEST(Autograd, NoGradModeRecordsNothing) {
  Tensor x = Tensor::from({2}, {1, 2}).set_requires_grad(true);
  NoGradGuard guard;
  Tensor y = ops::mul(x, x);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
}

TEST(Autograd, FrozenLeavesNeverGetGradientBuffers) {
  Tensor frozen = testing::random_tensor({4, 3}, 1);  // requires_grad false
  Tensor trainable = testing::random_tensor({4, 3}, 2).set_requires_grad(true);
  backward(ops::sum(ops::mul(frozen, trainable)));
  EXPECT_FALSE(frozen.grad().defined());
  EXPECT_TRUE(trainable.grad().defined());
}

TEST(Autograd, NodesKeepAnInspectableListOfSavedTensors) {
  Tensor x = testing::random_tensor({2, 4}, 1).set_requires_grad(true);
  Tensor w = testing::random_tensor({4}, 2).set_requires_grad(true);
  EXPECT_EQ(ops::rms_norm(x, w, 1e-5f).grad_fn()->saved.size(), 3u);  // x, w, rstd
  EXPECT_EQ(ops::add(x, x).grad_fn()->saved.size(), 0u);
  EXPECT_EQ(std::string(ops::silu(x).grad_fn()->op), "silu");
}

TEST(Autograd, SecondBackwardThroughAFreedGraphIsAnError) {
  Tensor x = Tensor::from({1}, {2}).set_requires_grad(true);
  Tensor loss = ops::sum(ops::mul(x, x));
  backward(loss);
  EXPECT_THROW(backward(loss), Error);
}

TEST(Autograd, ShapeMismatchesNameTheOpAndShapes) {
  auto message = [](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4, 5});
  EXPECT_EQ(message([&] { ops::add(a, b); }), "[add] shapes (2,3) and (4,5) do not broadcast");
  EXPECT_EQ(message([&] { ops::matmul(a, b); }), "[matmul] shapes (2,3) and (4,5)");
  EXPECT_NE(message([&] { ops::linear(a, b, Tensor()); }).find("[linear] input (2,3)"),
            std::string::npos);
  EXPECT_NE(message([&] { ops::reshape(a, {5}); }).find("[reshape] cannot view (2,3) as (5)"),
            std::string::npos);
  EXPECT_NE(
      message([&] { ops::rms_norm(a, Tensor::zeros({2}), 1e-5f); }).find("[rms_norm] input (2,3)"),
      std::string::npos);
  EXPECT_NE(message([&] {
              ops::attention(Tensor::zeros({1, 2, 3, 4}), Tensor::zeros({1, 2, 2, 4}),
                             Tensor::zeros({1, 2, 2, 4}), {}, kF32Compute);
            }).find("[attention] q (1,2,3,4)"),
            std::string::npos);
  std::vector<int32_t> ids{7};
  EXPECT_NE(message([&] {
              ops::embedding(ids, Tensor::zeros({5, 2}));
            }).find("token id 7"),
            std::string::npos);
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
  std::vector<std::vector<float>> want{w1.grad().to_vector(), w2.grad().to_vector(),
                                       w3.grad().to_vector()};
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

}  // namespace
}  // namespace glm4
