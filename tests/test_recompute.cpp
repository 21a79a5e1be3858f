// Checkpointing (autograd/recompute.h): a recomputed block gives the gradients of the plain one,
// inside the block and through its input, records nothing without trainable tensors, and lowers
// the peak memory of a chain of blocks.
#include <gtest/gtest.h>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/recompute.h"
#include "autograd/weight.h"
#include "tests/support/gradcheck.h"

namespace glm4 {
namespace {
using V = std::vector<Tensor>;

// A LoRA-shaped MLP block: frozen up/down weights (4x expansion), trainable A and B on the up
// projection, and an input that may need no gradient.
struct LoraBlock {
  Weight up, down;
  Tensor a, b;
  Tensor operator()(const V& in) const {
    Tensor lora = ops::linear(ops::linear(in[0], a, Tensor()), b, Tensor());
    Tensor hidden =
        ops::silu(ops::add(ops::linear(in[0], up, Tensor(), kF32Compute), ops::scale(lora, 2.0f)));
    return ops::add(in[0], ops::linear(hidden, down, Tensor(), kF32Compute));
  }
};

LoraBlock make_block(int64_t h, int64_t r, uint64_t seed) {
  std::vector<float> w = ops::scale(testing::random_tensor({4 * h, h}, seed), 0.1f).to_vector();
  std::vector<float> w2 =
      ops::scale(testing::random_tensor({h, 4 * h}, seed + 3), 0.1f).to_vector();
  return {
      Weight::from_f32(w.data(), 4 * h, h), Weight::from_f32(w2.data(), h, 4 * h),
      ops::scale(testing::random_tensor({r, h}, seed + 1), 0.3f).detach().set_requires_grad(true),
      ops::scale(testing::random_tensor({4 * h, r}, seed + 2), 0.3f)
          .detach()
          .set_requires_grad(true)};
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
  EXPECT_LT(checkpointed * 10, plain * 6)
      << "plain " << plain << " bytes, checkpointed " << checkpointed;
}

}  // namespace
}  // namespace glm4
