// Table-driven finite-difference check of every op's backward, edge shapes included.
#include <gtest/gtest.h>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/recompute.h"
#include "autograd/weight.h"
#include "tests/support/gradcheck.h"

namespace glm4 {
namespace {
using testing::GradCase;
using V = std::vector<Tensor>;

std::vector<int32_t> positions(int64_t b, int64_t t, int32_t offset) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < t; ++j) p.push_back(int32_t(j) + offset + int32_t(i) * 5);
  return p;
}

AttentionMask padded_mask(std::vector<int32_t> kv_end, int64_t q_offset = 0) {
  AttentionMask m;
  m.kv_end = std::move(kv_end);
  m.q_offset = q_offset;
  return m;
}

GradCase attention_case(std::string name, int64_t B, int64_t T, int64_t S, int64_t Hq, int64_t Hkv,
                        int64_t D, AttentionMask mask) {
  return {name,
          {{B, T, Hq, D}, {B, S, Hkv, D}, {B, S, Hkv, D}},
          [mask](const V& x) { return ops::attention(x[0], x[1], x[2], mask, kF32Compute); },
          2e-2};
}

std::vector<GradCase> all_cases() {
  std::vector<GradCase> c;
  // elementwise with broadcasting
  c.push_back({"add", {{2, 3, 4}, {2, 3, 4}}, [](const V& x) { return ops::add(x[0], x[1]); }});
  c.push_back(
      {"add_broadcast", {{2, 3, 4}, {3, 1}}, [](const V& x) { return ops::add(x[0], x[1]); }});
  c.push_back({"add_scalar", {{4}, {}}, [](const V& x) { return ops::add(x[0], x[1]); }});
  c.push_back({"sub_broadcast", {{4}, {2, 3, 4}}, [](const V& x) { return ops::sub(x[0], x[1]); }});
  c.push_back(
      {"mul_broadcast", {{2, 1, 4}, {3, 1}}, [](const V& x) { return ops::mul(x[0], x[1]); }});
  c.push_back({"scale", {{3, 5}}, [](const V& x) { return ops::scale(x[0], -2.5f); }});
  c.push_back({"dropout", {{4, 9}}, [](const V& x) { return ops::dropout(x[0], 0.3f, 42); }});
  // unary and activations
  c.push_back({"exp", {{2, 5}}, [](const V& x) { return ops::exp(x[0]); }});
  GradCase log_case{"log", {{2, 5}}, [](const V& x) { return ops::log(x[0]); }};
  log_case.lo = 0.5f;
  log_case.hi = 2.0f;
  log_case.eps = 1e-3f;
  c.push_back(log_case);
  GradCase rsqrt_case{"rsqrt", {{7}}, [](const V& x) { return ops::rsqrt(x[0]); }};
  rsqrt_case.lo = 0.5f;
  rsqrt_case.hi = 2.0f;
  rsqrt_case.eps = 1e-3f;
  c.push_back(rsqrt_case);
  c.push_back({"sigmoid", {{3, 3}}, [](const V& x) { return ops::sigmoid(x[0]); }});
  c.push_back({"silu", {{3, 7}}, [](const V& x) { return ops::silu(x[0]); }});
  c.push_back({"swiglu", {{2, 3, 10}}, [](const V& x) { return ops::swiglu(x[0]); }});
  c.push_back({"swiglu_len1", {{1, 2}}, [](const V& x) { return ops::swiglu(x[0]); }});
  c.push_back({"swiglu_gate_up", {{2, 3, 5}, {2, 3, 5}}, [](const V& x) {
                 return ops::swiglu(x[0], x[1]);
               }});
  c.push_back({"swiglu_row_scaled", {{3, 5}, {3, 5}, {3, 1}}, [](const V& x) {
                 return ops::swiglu(x[0], x[1], x[2]);
               }});
  c.push_back({"softmax", {{3, 7}}, [](const V& x) { return ops::softmax(x[0]); }});
  c.push_back({"softmax_len1", {{2, 1}}, [](const V& x) { return ops::softmax(x[0]); }});
  // reductions
  c.push_back({"sum", {{2, 3}}, [](const V& x) { return ops::sum(x[0]); }});
  c.push_back({"mean", {{5, 3}}, [](const V& x) { return ops::mean(x[0]); }});
  c.push_back({"sum_last", {{2, 3, 5}}, [](const V& x) { return ops::sum_last(x[0]); }});
  // shape
  c.push_back({"reshape", {{2, 6}}, [](const V& x) { return ops::reshape(x[0], {3, -1}); }});
  c.push_back({"transpose_3d", {{2, 3, 5}}, [](const V& x) { return ops::transpose(x[0], 0, 2); }});
  c.push_back(
      {"transpose_4d", {{2, 3, 4, 5}}, [](const V& x) { return ops::transpose(x[0], 1, 2); }});
  c.push_back({"slice", {{3, 7}}, [](const V& x) { return ops::slice(x[0], 1, 2, 5); }});
  c.push_back({"concat", {{2, 3}, {2, 1}, {2, 4}}, [](const V& x) { return ops::concat(x, 1); }});
  c.push_back({"split", {{5, 4}}, [](const V& x) {
                 V parts = ops::split(x[0], 0, {2, 3});
                 return ops::add(ops::slice(parts[1], 0, 0, 2), ops::scale(parts[0], 3.0f));
               }});
  // matmul and linear
  c.push_back({"matmul", {{3, 5}, {5, 4}}, [](const V& x) { return ops::matmul(x[0], x[1]); }});
  c.push_back({"matmul_1x1", {{1, 1}, {1, 1}}, [](const V& x) { return ops::matmul(x[0], x[1]); }});
  c.push_back({"matmul_batched", {{2, 3, 5}, {2, 5, 4}}, [](const V& x) {
                 return ops::matmul(x[0], x[1]);
               }});
  c.push_back(
      {"matmul_shared_b", {{2, 3, 5}, {5, 4}}, [](const V& x) { return ops::matmul(x[0], x[1]); }});
  c.push_back({"linear", {{2, 3, 7}, {5, 7}, {5}}, [](const V& x) {
                 return ops::linear(x[0], x[1], x[2]);
               }});
  // add_low_rank consumes its first operand, so it gets a fresh one (scale by 1) every call.
  c.push_back({"add_low_rank", {{2, 3, 5}, {2, 3, 4}, {5, 4}}, [](const V& x) {
                 return ops::add_low_rank(ops::scale(x[0], 1.0f), x[1], x[2], 0.7f);
               }});
  c.push_back({"linear_nobias_m1", {{1, 7}, {3, 7}}, [](const V& x) {
                 return ops::linear(x[0], x[1], Tensor());
               }});
  c.push_back({"linear_frozen_bf16", {{4, 6}, {3}}, [](const V& x) {
                 static std::vector<float> w = testing::random_tensor({3, 6}, 9).to_vector();
                 return ops::linear(x[0], Weight::from_f32(w.data(), 3, 6, DType::BF16), x[1],
                                    kF32Compute);
               }});
  // embedding
  c.push_back({"embedding", {{6, 4}}, [](const V& x) {
                 std::vector<int32_t> ids{3, 0, 3, 5, 1};
                 return ops::embedding(ids, x[0]);
               }});
  // norm
  c.push_back(
      {"rms_norm", {{3, 7}, {7}}, [](const V& x) { return ops::rms_norm(x[0], x[1], 1e-5f); }});
  c.push_back({"rms_norm_len1", {{1, 1, 1}, {1}}, [](const V& x) {
                 return ops::rms_norm(x[0], x[1], 1e-5f);
               }});
  // rope
  c.push_back({"rope_partial", {{2, 3, 2, 8}}, [](const V& x) {
                 static auto pos = positions(2, 3, 4);
                 return ops::rope(x[0], pos, 4, 10000.0);
               }});
  c.push_back({"rope_full_offset", {{1, 5, 3, 6}}, [](const V& x) {
                 static auto pos = positions(1, 5, 1000);
                 return ops::rope(x[0], pos, 6, 500.0);
               }});
  c.push_back({"rope_rotate_half", {{2, 3, 2, 12}}, [](const V& x) {
                 static auto pos = positions(2, 3, 7);
                 return ops::rope(x[0], pos, 8, 10000.0, RopeStyle::RotateHalf);
               }});
  c.push_back({"rope_yarn_frequencies_scaled", {{2, 3, 2, 8}}, [](const V& x) {
                 static auto pos = positions(2, 3, 50);
                 static const RopeFrequencies f{{1.0f, 0.3f, 0.02f}, 1.14f};
                 return ops::rope(x[0], pos, f, RopeStyle::RotateHalf);
               }});
  c.push_back({"rope_rotate_half_full", {{1, 4, 3, 6}}, [](const V& x) {
                 static auto pos = positions(1, 4, 300);
                 return ops::rope(x[0], pos, 6, 500.0, RopeStyle::RotateHalf);
               }});
  // indexing (the MoE dispatch and combine) and division
  c.push_back({"gather_rows", {{5, 3}}, [](const V& x) {
                 static const std::vector<int64_t> rows{4, 0, 4, 2};
                 return ops::gather_rows(x[0], rows);
               }});
  // Increasing rows hand back their gradient rows alone (Node::grad_rows), twice into one node.
  c.push_back({"gather_rows_increasing_into_one_node_twice", {{5, 3}}, [](const V& x) {
                 static const std::vector<std::vector<int64_t>> rows{{0, 2, 4}, {1, 2}};
                 const Tensor h = ops::scale(x[0], 2.0f);
                 return ops::scatter_add_rows(
                     {ops::gather_rows(h, rows[0]), ops::gather_rows(h, rows[1])}, rows, 5);
               }});
  // An expert's LoRA A product keeps its source, not its gathered input; its weight's gradient
  // is whole while the source's comes back as rows (Node::grad_rows_input), beside the gather's.
  c.push_back({"linear_gathered_beside_its_gather", {{5, 4}, {3, 4}, {3, 4}}, [](const V& x) {
                 static const std::vector<int64_t> rows{0, 2, 3};
                 const Tensor h = ops::scale(x[0], 2.0f);
                 const Tensor g = ops::gather_rows(h, rows);
                 return ops::add(ops::linear_gathered(g, h, rows, x[1]),
                                 ops::linear(g, x[2], Tensor()));
               }});
  c.push_back({"linear_gathered_repeated_rows", {{4, 3}, {2, 3}}, [](const V& x) {
                 static const std::vector<int64_t> rows{1, 1, 3};
                 return ops::linear_gathered(ops::gather_rows(x[0], rows), x[0], rows, x[1]);
               }});
  c.push_back({"scatter_add_rows", {{3, 4}, {1, 4}, {2, 4}}, [](const V& x) {
                 static const std::vector<std::vector<int64_t>> rows{{0, 2, 5}, {2}, {5, 1}};
                 return ops::scatter_add_rows(x, rows, 6);
               }});
  c.push_back({"gather_last", {{3, 5}}, [](const V& x) {
                 static const std::vector<int32_t> index{4, 1, 0, 0, 2, 3};
                 return ops::gather_last(x[0], index, 2);
               }});
  GradCase div_case{
      "div_broadcast", {{3, 4}, {3, 1}}, [](const V& x) { return ops::div(x[0], x[1]); }};
  div_case.lo = 0.5f;
  div_case.hi = 2.0f;
  div_case.eps = 1e-3f;
  c.push_back(div_case);
  // attention: GQA 1 and 8, length 1, odd sizes, tiles crossed, padding rows, decode offset,
  // packing
  c.push_back(attention_case("attention_mha", 2, 5, 5, 2, 2, 4, {}));
  c.push_back(attention_case("attention_gqa8", 1, 3, 3, 8, 1, 3, {}));
  c.push_back(attention_case("attention_len1", 1, 1, 1, 2, 1, 5, {}));
  c.push_back(attention_case("attention_tiles", 1, 70, 70, 2, 1, 3, {}));
  c.push_back(attention_case("attention_padding", 3, 6, 6, 4, 2, 3, padded_mask({4, 6, 0})));
  c.push_back(attention_case("attention_decode_offset", 2, 2, 7, 2, 1, 4, padded_mask({7, 6}, 5)));
  AttentionMask packed;
  packed.seg_start = {0, 0, 0, 3, 3, 5, 0, 0, 2, 2, 2, 2};
  c.push_back(attention_case("attention_packed", 2, 6, 6, 2, 2, 3, packed));
  AttentionMask left;
  left.kv_begin = {2, 0};
  c.push_back(attention_case("attention_left_pad", 2, 5, 5, 2, 1, 4, left));
  // loss
  c.push_back({"cross_entropy", {{5, 7}}, [](const V& x) {
                 std::vector<int32_t> labels{1, -100, 6, 0, 3};
                 return ops::cross_entropy(x[0], labels);
               }});
  c.push_back({"cross_entropy_divisor", {{3, 4}}, [](const V& x) {
                 std::vector<int32_t> labels{1, 2, -100};
                 return ops::cross_entropy(x[0], labels, 5.0);
               }});
  c.push_back({"linear_cross_entropy", {{300, 4}, {7, 4}}, [](const V& x) {
                 std::vector<int32_t> labels;
                 for (int i = 0; i < 300; ++i) labels.push_back(i % 5 == 0 ? -100 : i % 7);
                 return ops::linear_cross_entropy(x[0], Weight(), x[1], labels, 0, kF32Compute);
               }});
  // checkpointed block: input and a parameter used inside both get gradients
  c.push_back({"recompute", {{3, 4}, {4, 4}}, [](const V& x) {
                 Tensor w = x[1];
                 return recompute(
                     [w](const V& in) { return ops::silu(ops::linear(in[0], w, Tensor())); },
                     {x[0]});
               }});
  return c;
}

class GradCheck : public ::testing::TestWithParam<GradCase> {};

TEST_P(GradCheck, MatchesFiniteDifferences) {
  std::string report = testing::check_gradients(GetParam());
  EXPECT_TRUE(report.empty()) << report;
}

INSTANTIATE_TEST_SUITE_P(Ops, GradCheck, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<GradCase>& info) {
                           return info.param.name;
                         });

TEST(GradCheck, CrossEntropyWithNoTargetsIsZeroWithZeroGradient) {
  Tensor logits = testing::random_tensor({2, 3}, 5);
  logits.set_requires_grad(true);
  std::vector<int32_t> labels{-100, -100};
  Tensor loss = ops::cross_entropy(logits, labels);
  EXPECT_EQ(loss.item(), 0.0f);
  backward(loss);
  for (float g : logits.grad().to_vector()) EXPECT_EQ(g, 0.0f);
}

TEST(GradCheck, AllPaddingRowsGiveZeroOutputAndGradient) {
  Tensor q = testing::random_tensor({1, 3, 2, 4}, 1), k = testing::random_tensor({1, 3, 1, 4}, 2),
         v = testing::random_tensor({1, 3, 1, 4}, 3);
  q.set_requires_grad(true);
  AttentionMask m;
  m.kv_end = {0};
  Tensor out = ops::attention(q, k, v, m, kF32Compute);
  for (float x : out.to_vector()) EXPECT_EQ(x, 0.0f);
  backward(ops::sum(out));
  for (float x : q.grad().to_vector()) EXPECT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace glm4

namespace glm4 {
namespace {
// The checker itself must be able to fail: an op with a deliberately wrong backward.
TEST(GradCheck, DetectsAWrongBackward) {
  GradCase wrong{"wrong_square", {{4}}, [](const V& x) {
                   Tensor y = ops::mul(x[0], x[0]).detach();
                   return record(
                       y, "wrong_square", {x[0]}, {x[0].detach()}, [](Node& n, const Tensor& g) {
                         return std::vector<Tensor>{ops::mul(g, n.saved[0])};  // missing factor 2
                       });
                 }};
  std::string report = testing::check_gradients(wrong);
  EXPECT_NE(report.find("wrong_square: input 0 (4) worst element"), std::string::npos) << report;
}
}  // namespace
}  // namespace glm4
