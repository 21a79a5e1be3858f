// The tape: accumulation into leaves, no-grad mode, frozen tensors, checkpointing, errors.
#include <gtest/gtest.h>

#include "base/check.h"
#include "autograd/recompute.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/weight.h"
#include "tests/support/gradcheck.h"

namespace glm4 {
namespace {
using V = std::vector<Tensor>;

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
  EXPECT_NE(message([&] { ops::linear(a, b, Tensor()); }).find("[linear] input (2,3)"), std::string::npos);
  EXPECT_NE(message([&] { ops::reshape(a, {5}); }).find("[reshape] cannot view (2,3) as (5)"),
            std::string::npos);
  EXPECT_NE(message([&] { ops::rms_norm(a, Tensor::zeros({2}), 1e-5f); }).find("[rms_norm] input (2,3)"),
            std::string::npos);
  EXPECT_NE(message([&] { ops::attention(Tensor::zeros({1, 2, 3, 4}), Tensor::zeros({1, 2, 2, 4}),
                                         Tensor::zeros({1, 2, 2, 4}), {}, kF32Compute); })
                .find("[attention] q (1,2,3,4)"),
            std::string::npos);
  std::vector<int32_t> ids{7};
  EXPECT_NE(message([&] { ops::embedding(ids, Tensor::zeros({5, 2})); }).find("token id 7"),
            std::string::npos);
}

// A LoRA-shaped MLP block: frozen up/down weights (4x expansion), trainable A and B on the up
// projection, and an input that may need no gradient.
struct LoraBlock {
  Weight up, down;
  Tensor a, b;
  Tensor operator()(const V& in) const {
    Tensor lora = ops::linear(ops::linear(in[0], a, Tensor()), b, Tensor());
    Tensor hidden = ops::silu(ops::add(ops::linear(in[0], up, Tensor(), kF32Compute), ops::scale(lora, 2.0f)));
    return ops::add(in[0], ops::linear(hidden, down, Tensor(), kF32Compute));
  }
};

LoraBlock make_block(int64_t h, int64_t r, uint64_t seed) {
  std::vector<float> w = ops::scale(testing::random_tensor({4 * h, h}, seed), 0.1f).to_vector();
  std::vector<float> w2 = ops::scale(testing::random_tensor({h, 4 * h}, seed + 3), 0.1f).to_vector();
  return {Weight::from_f32(w.data(), 4 * h, h), Weight::from_f32(w2.data(), h, 4 * h),
          ops::scale(testing::random_tensor({r, h}, seed + 1), 0.3f).detach().set_requires_grad(true),
          ops::scale(testing::random_tensor({4 * h, r}, seed + 2), 0.3f).detach().set_requires_grad(true)};
}

TEST(Checkpoint, GivesIdenticalGradientsIncludingParametersInsideTheBlock) {
  Tensor x = testing::random_tensor({5, 8}, 3);  // frozen input: the PEFT#137 case
  LoraBlock block = make_block(8, 2, 10);
  backward(ops::sum(block({x})));
  Tensor ga = block.a.grad().clone(), gb = block.b.grad().clone();
  block.a.zero_grad();
  block.b.zero_grad();
  Tensor out = recompute(block, {x});
  EXPECT_TRUE(out.requires_grad());
  EXPECT_EQ(out.grad_fn()->saved.size(), 1u);  // only the input
  backward(ops::sum(out));
  ASSERT_TRUE(block.a.grad().defined() && block.b.grad().defined());
  EXPECT_EQ(block.a.grad().to_vector(), ga.to_vector());
  EXPECT_EQ(block.b.grad().to_vector(), gb.to_vector());
}

TEST(Checkpoint, InputGradientsFlowThrough) {
  Tensor x = testing::random_tensor({3, 8}, 4).set_requires_grad(true);
  LoraBlock block = make_block(8, 2, 20);
  Tensor y0 = block({x});
  backward(ops::sum(ops::mul(y0, y0)));
  Tensor plain = x.grad().clone();
  x.zero_grad();
  Tensor y = recompute(block, {x});
  backward(ops::sum(ops::mul(y, y)));
  EXPECT_EQ(x.grad().to_vector(), plain.to_vector());
}

TEST(Checkpoint, BlockWithoutTrainableTensorsRecordsNothing) {
  Tensor x = testing::random_tensor({3, 4}, 4);
  Tensor y = recompute([](const V& in) { return ops::silu(in[0]); }, {x});
  EXPECT_FALSE(y.requires_grad());
}

// Peak tensor memory of forward + backward through an 8-block chain.
int64_t chain_peak_bytes(bool use_checkpoint, std::vector<LoraBlock>& blocks) {
  Tensor x = testing::random_tensor({256, 128}, 5);
  for (auto& b : blocks) {
    b.a.zero_grad();
    b.b.zero_grad();
  }
  TensorMemory::reset_peak();
  int64_t before = TensorMemory::live_bytes();
  {
    Tensor h = x;
    for (auto& b : blocks) h = use_checkpoint ? recompute(b, {h}) : b({h});
    backward(ops::sum(h));
  }
  return TensorMemory::peak_bytes() - before;
}

TEST(Checkpoint, AnEightBlockChainPeaksLowerWithCheckpoints) {
  std::vector<LoraBlock> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(make_block(128, 4, 100 + 10 * i));
  int64_t plain = chain_peak_bytes(false, blocks);
  std::vector<float> plain_grad = blocks[0].a.grad().to_vector();
  int64_t checkpointed = chain_peak_bytes(true, blocks);
  EXPECT_EQ(blocks[0].a.grad().to_vector(), plain_grad);
  EXPECT_LT(checkpointed * 10, plain * 6) << "plain " << plain << " bytes, checkpointed " << checkpointed;
}

}  // namespace
}  // namespace glm4
