// Fused ops equal their compositions from primitive ops, in values and gradients.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/weight.h"
#include "tests/support/gradcheck.h"

namespace glm4 {
namespace {
using V = std::vector<Tensor>;
using Fn = std::function<Tensor(const V&)>;

// Runs fused and composed on the same random inputs; compares outputs and input gradients.
void expect_same(const std::vector<Shape>& shapes, const Fn& fused, const Fn& composed, double tol,
                 const char* what) {
  auto run = [&](const Fn& fn, V* grads) {
    V inputs;
    for (size_t i = 0; i < shapes.size(); ++i)
      inputs.push_back(testing::random_tensor(shapes[i], 100 + i).set_requires_grad(true));
    Tensor out = fn(inputs);
    Tensor r = testing::random_tensor(out.shape(), 7);
    backward(ops::sum(ops::mul(out, r)));
    for (auto& t : inputs) grads->push_back(t.grad());
    return out;
  };
  V ga, gb;
  Tensor a = run(fused, &ga), b = run(composed, &gb);
  ASSERT_EQ(a.shape(), b.shape()) << what;
  auto compare = [&](const Tensor& x, const Tensor& y, const std::string& name) {
    double worst = 0, scale = 1e-6;
    for (int64_t i = 0; i < x.numel(); ++i) scale = std::max(scale, double(std::abs(y.data()[i])));
    for (int64_t i = 0; i < x.numel(); ++i)
      worst = std::max(worst, double(std::abs(x.data()[i] - y.data()[i])) / scale);
    EXPECT_LE(worst, tol) << what << " " << name << " " << shape_str(x.shape());
  };
  compare(a, b, "output");
  for (size_t i = 0; i < ga.size(); ++i) {
    ASSERT_EQ(ga[i].defined(), gb[i].defined()) << what << " gradient " << i;
    if (!ga[i].defined()) continue;  // an input neither side differentiates (a frozen weight)
    compare(ga[i], gb[i], "gradient of input " + std::to_string(i));
  }
}

TEST(FusedOps, RmsNormEqualsComposition) {
  float eps = 1e-5f;
  expect_same(
      {{3, 5, 16}, {16}}, [&](const V& x) { return ops::rms_norm(x[0], x[1], eps); },
      [&](const V& x) {
        Tensor ms = ops::scale(ops::sum_last(ops::mul(x[0], x[0])), 1.0f / 16);
        Tensor inv = ops::rsqrt(ops::add(ms, Tensor::scalar(eps)));
        return ops::mul(ops::mul(x[0], inv), x[1]);
      },
      1e-5, "rms_norm");
}

TEST(FusedOps, SwigluEqualsComposition) {
  expect_same(
      {{2, 3, 14}}, [](const V& x) { return ops::swiglu(x[0]); },
      [](const V& x) {
        Tensor gate = ops::slice(x[0], -1, 0, 7), up = ops::slice(x[0], -1, 7, 14);
        return ops::mul(ops::mul(gate, ops::sigmoid(gate)), up);
      },
      1e-5, "swiglu");
}

// Bit for bit: SwigluMlp's experts switched to it from silu then mul, which the fixtures pin.
TEST(FusedOps, SwigluOfGateAndUpEqualsSiluThenMul) {
  expect_same(
      {{2, 3, 7}, {2, 3, 7}}, [](const V& x) { return ops::swiglu(x[0], x[1]); },
      [](const V& x) { return ops::mul(ops::silu(x[0]), x[1]); }, 0.0, "swiglu(gate, up)");
}

// rope(x) = x * C + (x P) * S with P the pair-swap matrix and C, S the cos/sin tables.
TEST(FusedOps, RopeEqualsComposition) {
  const int64_t B = 2, T = 9, H = 3, D = 8, R = 4;
  const double theta = 10000.0;
  std::vector<int32_t> pos;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) pos.push_back(int32_t(t + 100 * b));
  Tensor c = Tensor::empty({B, T, 1, D}), s = Tensor::empty({B, T, 1, D}),
         p = Tensor::zeros({D, D});
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t j = 0; j < D; ++j) {
      bool rotated = j < R;
      float inv_freq = float(1.0 / std::pow(theta, double(2 * (j / 2)) / double(R)));
      float angle = float(pos[r]) * inv_freq;
      c.data()[r * D + j] = rotated ? float(std::cos(double(angle))) : 1.0f;
      s.data()[r * D + j] = rotated ? float(std::sin(double(angle))) : 0.0f;
    }
  for (int64_t i = 0; i < R / 2; ++i) {
    p.data()[(2 * i + 1) * D + 2 * i] = -1.0f;  // (xP)[2i] = -x[2i+1]
    p.data()[(2 * i) * D + 2 * i + 1] = 1.0f;   // (xP)[2i+1] = x[2i]
  }
  expect_same(
      {{B, T, H, D}}, [&](const V& x) { return ops::rope(x[0], pos, R, theta); },
      [&](const V& x) { return ops::add(ops::mul(x[0], c), ops::mul(ops::matmul(x[0], p), s)); },
      1e-5, "rope");
}

// attention = softmax(q k^T / sqrt(D) + mask) v per head, kv heads repeated for GQA.
Tensor composed_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                          const AttentionMask& m) {
  int64_t B = q.dim(0), T = q.dim(1), Hq = q.dim(2), D = q.dim(3), S = k.dim(1), Hkv = k.dim(2);
  Tensor bias = Tensor::empty({B, 1, T, S});
  Tensor row_valid = Tensor::empty({B, T, 1, 1});  // padding query rows give 0, as in the kernel
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      int64_t lo, hi;
      m.range(b, t, S, &lo, &hi);
      row_valid.data()[b * T + t] = lo < hi ? 1.0f : 0.0f;
      for (int64_t j = 0; j < S; ++j)
        bias.data()[(b * T + t) * S + j] = (j >= lo && j < hi) ? 0.0f : -1e30f;
    }
  auto repeat_kv = [&](const Tensor& x) {  // [B,S,Hkv,D] -> [B,Hq,S,D]
    std::vector<Tensor> heads;
    for (int64_t h = 0; h < Hq; ++h)
      heads.push_back(ops::slice(x, 2, h / (Hq / Hkv), h / (Hq / Hkv) + 1));
    return ops::transpose(ops::concat(heads, 2), 1, 2);
  };
  Tensor qh = ops::transpose(q, 1, 2);                                  // [B,Hq,T,D]
  Tensor scores = ops::matmul(qh, ops::transpose(repeat_kv(k), 2, 3));  // [B,Hq,T,S]
  scores = ops::add(ops::scale(scores, float(1.0 / std::sqrt(double(D)))), bias);
  Tensor out = ops::matmul(ops::softmax(scores), repeat_kv(v));  // [B,Hq,T,D]
  return ops::mul(ops::transpose(out, 1, 2), row_valid);
}

TEST(FusedOps, AttentionEqualsComposition) {
  struct Case {
    int64_t B, T, S, Hq, Hkv, D;
    AttentionMask mask;
  };
  AttentionMask padded;
  padded.kv_end = {37, 80};
  AttentionMask decode;
  decode.q_offset = 77;
  AttentionMask packed;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 40; ++t) packed.seg_start.push_back(t < 13 ? 0 : t < 30 ? 13 : 30);
  std::vector<Case> cases{{2, 80, 80, 4, 2, 16, padded},
                          {1, 3, 80, 8, 1, 8, decode},
                          {2, 40, 40, 2, 2, 4, packed},
                          {1, 1, 1, 1, 1, 1, {}},
                          {1, 200, 200, 2, 1, 8, {}}};  // backward cut into 7 query splits
  for (const Case& c : cases) {
    expect_same(
        {{c.B, c.T, c.Hq, c.D}, {c.B, c.S, c.Hkv, c.D}, {c.B, c.S, c.Hkv, c.D}},
        [&](const V& x) { return ops::attention(x[0], x[1], x[2], c.mask, kF32Compute); },
        [&](const V& x) { return composed_attention(x[0], x[1], x[2], c.mask); }, 1e-5,
        "attention");
  }
}

TEST(FusedOps, CrossEntropyEqualsComposition) {
  std::vector<int32_t> labels{3, -100, 0, 9, 9, -100};
  Tensor onehot = Tensor::zeros({6, 10});
  for (int i = 0; i < 6; ++i)
    if (labels[i] >= 0) onehot.data()[i * 10 + labels[i]] = 1.0f;
  expect_same(
      {{6, 10}}, [&](const V& x) { return ops::cross_entropy(x[0], labels); },
      [&](const V& x) {
        Tensor logp = ops::log(ops::softmax(x[0]));
        return ops::scale(ops::sum(ops::mul(logp, onehot)), -1.0f / 4);
      },
      1e-5, "cross_entropy");
}

}  // namespace
}  // namespace glm4

namespace glm4 {
namespace {
TEST(FusedOps, LinearCrossEntropyEqualsLinearThenCrossEntropy) {
  std::vector<int32_t> labels;
  for (int i = 0; i < 300; ++i) labels.push_back(i % 7 == 0 ? -100 : (i * 13) % 37);
  for (bool trainable : {false, true}) {
    expect_same(
        {{300, 16}, {37, 16}},
        [&](const V& x) {
          Weight frozen = Weight::from_f32(x[1].data(), 37, 16);
          return ops::linear_cross_entropy(x[0], frozen, trainable ? x[1] : Tensor(), labels, 0,
                                           kF32Compute);
        },
        [&](const V& x) {
          Weight frozen = Weight::from_f32(x[1].data(), 37, 16);
          Tensor logits = trainable ? ops::linear(x[0], x[1], Tensor())
                                    : ops::linear(x[0], frozen, Tensor(), kF32Compute);
          return ops::cross_entropy(logits, labels);
        },
        1e-5, trainable ? "linear_cross_entropy (trainable)" : "linear_cross_entropy");
  }
}
}  // namespace
}  // namespace glm4
