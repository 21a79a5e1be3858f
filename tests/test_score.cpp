// score_loss (perplexity, validation loss, evaluate's answer loss, also per task) equals the
// cross-entropy of a plain forward pass, whatever the batching, with labels shifted by one and
// -100 ignored; and row_log_probs (classify's scores) is that loss per row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "base/check.h"
#include "infer/score.h"
#include "io/safetensors.h"

namespace glm4 {
namespace {

struct Examples {
  std::vector<std::vector<int32_t>> ids;
  int64_t T = 0;
};

Examples fixture_examples(const std::string& dir) {
  auto file = SafetensorsFile::open(dir + "/fixture.safetensors");
  const TensorInfo& t = file->at("input_ids");
  std::vector<int64_t> ids = read_int(t), lengths = read_int(file->at("lengths"));
  Examples e;
  e.T = t.shape[1];
  for (int64_t b = 0; b < t.shape[0]; ++b)
    e.ids.emplace_back(ids.begin() + b * e.T, ids.begin() + b * e.T + lengths[size_t(b)]);
  return e;
}

// Mean next-token loss of one padded forward over every example, via ops::cross_entropy.
double reference_loss(const Glm4Model& model, const Examples& e,
                      const std::vector<std::vector<int32_t>>& labels) {
  NoGradGuard no_grad;
  const int64_t B = int64_t(e.ids.size()), T = e.T;
  ForwardContext ctx;
  ctx.batch = B;
  ctx.seq = T;
  std::vector<int32_t> ids(size_t(B * T), 0), targets(size_t(B * T), -100);
  for (int64_t b = 0; b < B; ++b) {
    const auto& x = e.ids[size_t(b)];
    const auto& y = labels.empty() ? x : labels[size_t(b)];
    ctx.mask.kv_end.push_back(int32_t(x.size()));
    for (int64_t t = 0; t < T; ++t) ctx.positions.push_back(int32_t(t));
    for (size_t t = 0; t < x.size(); ++t) ids[size_t(b * T) + t] = x[t];
    for (size_t t = 1; t < x.size(); ++t) targets[size_t(b * T) + t - 1] = y[t];
  }
  Tensor logits = model.logits(model.forward_hidden(ids, ctx), ctx);  // [B, T, V]
  return ops::cross_entropy(ops::reshape(logits, {B * T, model.config.vocab_size}), targets).item();
}

// Examples of `ids` with `labels` (an empty list: the ids themselves).
std::vector<Example> as_examples(const std::vector<std::vector<int32_t>>& ids,
                                 const std::vector<std::vector<int32_t>>& labels) {
  std::vector<Example> out;
  for (size_t i = 0; i < ids.size(); ++i)
    out.push_back({ids[i], labels.empty() || labels[i].empty() ? ids[i] : labels[i]});
  return out;
}

TEST(ScoreLoss, EqualsThePlainForwardCrossEntropy) {
  for (const char* name : {"tiny_glm4", "tiny_chatglm"}) {
    std::string dir = std::string(GLM4_TEST_DATA) + "/" + name;
    auto model = load_model(dir);
    Examples e = fixture_examples(dir);
    ASSERT_EQ(e.ids.size(), 2u);
    ASSERT_NE(e.ids[0].size(), e.ids[1].size());
    double want = reference_loss(*model, e, {});
    int64_t tokens = int64_t(e.ids[0].size() + e.ids[1].size()) - 2;
    for (int64_t batch : {1, 2, 5}) {
      LossScore r = score_loss(*model, as_examples(e.ids, {}), batch);
      EXPECT_NEAR(r.loss, want, 1e-5 * want) << name << " batch " << batch;
      EXPECT_DOUBLE_EQ(r.perplexity, std::exp(r.loss));
      EXPECT_EQ(r.tokens, tokens);
    }

    // Labels: -100 on the first half of each example, a different target stream elsewhere.
    std::vector<std::vector<int32_t>> labels;
    std::vector<int64_t> scored;
    for (const auto& x : e.ids) {
      std::vector<int32_t> y(x.size());
      for (size_t t = 0; t < x.size(); ++t) y[t] = t < x.size() / 2 ? -100 : (x[t] * 7 + 3) % 512;
      scored.push_back(std::count_if(y.begin() + 1, y.end(), [](int32_t l) { return l != -100; }));
      labels.push_back(y);
    }
    double want_masked = reference_loss(*model, e, labels);
    LossScore r = score_loss(*model, as_examples(e.ids, labels), 2);
    EXPECT_NEAR(r.loss, want_masked, 1e-5 * want_masked) << name;
    EXPECT_EQ(r.tokens, scored[0] + scored[1]);
    EXPECT_GT(std::abs(r.loss - want), 1e-3);  // the labels did matter
    // An empty label list means "the ids" for that example.
    std::vector<std::vector<int32_t>> mixed = {labels[0], e.ids[1]};
    LossScore m = score_loss(*model, as_examples(e.ids, {labels[0], {}}), 1);
    EXPECT_NEAR(m.loss, reference_loss(*model, e, mixed), 1e-5 * want) << name;
    EXPECT_EQ(m.tokens, scored[0] + int64_t(e.ids[1].size()) - 1);
  }
}

TEST(ScoreLoss, OnlyTheFirstMaxBatches) {
  std::string dir = std::string(GLM4_TEST_DATA) + "/tiny_glm4";
  auto model = load_model(dir);
  Examples e = fixture_examples(dir);
  std::vector<Example> examples = as_examples(e.ids, {});
  LossScore first = score_loss(*model, {examples[0]}, 1);
  LossScore limited = score_loss(*model, examples, 1, /*max_batches=*/1);
  EXPECT_EQ(limited.loss, first.loss);
  EXPECT_EQ(limited.tokens, int64_t(e.ids[0].size()) - 1);
  EXPECT_TRUE(std::isnan(score_loss(*model, {{{1}, {1}}}, 1).loss));  // one token: nothing to score
}

// row_log_probs (what classify ranks labels by) splits batch_loss by row: each row's value is
// minus the summed loss of that example alone, whatever else shares the padded batch.
TEST(RowLogProbs, EqualMinusTheSummedLossOfEachExample) {
  for (const char* name : {"tiny_glm4", "tiny_chatglm"}) {
    std::string dir = std::string(GLM4_TEST_DATA) + "/" + name;
    auto model = load_model(dir);
    Examples e = fixture_examples(dir);
    std::vector<std::vector<int32_t>> labels;
    for (const auto& x : e.ids) {  // targets on the second half only, as an answer after a prompt
      std::vector<int32_t> y(x.size(), kIgnoreLabel);
      for (size_t t = x.size() / 2; t < x.size(); ++t) y[t] = x[t];
      labels.push_back(y);
    }
    std::vector<Example> examples = as_examples(e.ids, labels);
    examples.push_back(
        {e.ids[0], std::vector<int32_t>(e.ids[0].size(), kIgnoreLabel)});  // no targets
    std::vector<double> got = row_log_probs(*model, make_batch(examples, 0, 3, 0));
    ASSERT_EQ(got.size(), 3u);
    for (size_t i = 0; i < 2; ++i) {
      LossScore alone = score_loss(*model, {examples[i]}, 1);
      double want = -alone.loss * double(alone.tokens);
      EXPECT_NEAR(got[i], want, 1e-5 * std::abs(want)) << name << " row " << i;
    }
    EXPECT_EQ(got[2], 0.0);
  }
}

// evaluate's per-task figures: each task's loss is score_loss over its examples alone (untasked
// ones left out), and its exact-match rate is its correct share.
TEST(ScoreLoss, ByTaskScoresEachTasksExamplesAlone) {
  std::string dir = std::string(GLM4_TEST_DATA) + "/tiny_glm4";
  auto model = load_model(dir);
  std::vector<Example> ex = as_examples(fixture_examples(dir).ids, {});
  ASSERT_GE(ex.size(), 2u);
  std::map<std::string, LossScore> got =
      score_loss_by_task(*model, {ex[0], ex[1], ex[1], ex[0]}, {"a", "b", "a", ""}, 2);
  ASSERT_EQ(got.size(), 2u);
  const LossScore a = score_loss(*model, {ex[0], ex[1]}, 2), b = score_loss(*model, {ex[1]}, 2);
  EXPECT_EQ(got["a"].loss, a.loss);
  EXPECT_EQ(got["a"].tokens, a.tokens);
  EXPECT_EQ(got["b"].loss, b.loss);
  EXPECT_NE(got["a"].loss, got["b"].loss);
  EXPECT_THROW(score_loss_by_task(*model, {ex[0]}, {"a", "b"}, 2), Error);

  ExactMatchScore em;
  em.by_task = {{"x", {1, 4}}, {"y", {3, 3}}};
  EXPECT_EQ(em.rate_by_task(), (std::map<std::string, double>{{"x", 0.25}, {"y", 1.0}}));
}

TEST(ScoreLoss, RejectsMismatchedInputs) {
  auto model = load_model(std::string(GLM4_TEST_DATA) + "/tiny_glm4");
  EXPECT_THROW(score_loss(*model, {{{1, 2, 3}, {1, 2}}}, 1), Error);
  EXPECT_THROW(score_loss(*model, {{{1, 2, 3}, {1, 2, 3}}}, 0), Error);
  EXPECT_THROW(score_loss(*model, {{{}, {}}}, 1), Error);
  EXPECT_THROW(score_loss(*model, {{{1, 2, 3}, {1, 2, 999}}}, 1), Error);
}

}  // namespace
}  // namespace glm4
