// The sampler's filters on crafted logits: each one's effect seen through the empirical
// distribution of many draws, greedy argmax, repetition penalty, and seeded determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "base/check.h"
#include "infer/sampler.h"

namespace glm4 {
namespace {

// Counts of each id over `n` draws.
std::map<int32_t, int> draw(SamplerConfig cfg, const std::vector<float>& logits, int n,
                            const std::vector<int32_t>& history = {}) {
  Sampler s(cfg);
  std::map<int32_t, int> counts;
  for (int i = 0; i < n; ++i) ++counts[s.sample(logits, history)];
  return counts;
}

std::set<int32_t> support(const std::map<int32_t, int>& counts) {
  std::set<int32_t> ids;
  for (auto [id, c] : counts) ids.insert(id);
  return ids;
}

// log-probabilities 0.4, 0.3, 0.2, 0.1 at ids 3, 0, 2, 1.
const std::vector<float> kLogits = {std::log(0.3f), std::log(0.1f), std::log(0.2f), std::log(0.4f)};

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  Sampler s(SamplerConfig{});
  EXPECT_EQ(s.sample(kLogits, {}), 3);
  std::vector<float> tie = {1.0f, 5.0f, -2.0f, 5.0f};
  EXPECT_EQ(s.sample(tie, {}), 1);
  std::vector<float> with_inf = {-INFINITY, -3.0f, -INFINITY};
  EXPECT_EQ(s.sample(with_inf, {}), 1);
}

TEST(Sampler, FullSamplingFollowsTheSoftmax) {
  SamplerConfig cfg;
  cfg.temperature = 1;
  cfg.seed = 7;
  const int n = 40000;
  auto counts = draw(cfg, kLogits, n);
  const double p[4] = {0.3, 0.1, 0.2, 0.4};
  for (int id = 0; id < 4; ++id) EXPECT_NEAR(counts[id] / double(n), p[id], 0.01) << id;
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  SamplerConfig cold, hot;
  cold.temperature = 0.25f;
  hot.temperature = 4.0f;
  const int n = 20000;
  auto c = draw(cold, kLogits, n), h = draw(hot, kLogits, n);
  // p ~ q^(1/T): at T = 1/4 the top token has 0.4^4 / sum(q^4) = 0.64.
  double sum4 = std::pow(0.3, 4) + std::pow(0.1, 4) + std::pow(0.2, 4) + std::pow(0.4, 4);
  EXPECT_NEAR(c[3] / double(n), std::pow(0.4, 4) / sum4, 0.015);
  double sumq =
      std::pow(0.3, 0.25) + std::pow(0.1, 0.25) + std::pow(0.2, 0.25) + std::pow(0.4, 0.25);
  EXPECT_NEAR(h[1] / double(n), std::pow(0.1, 0.25) / sumq, 0.015);
}

TEST(Sampler, TopKKeepsTheKMostLikely) {
  SamplerConfig cfg;
  cfg.temperature = 1;
  cfg.top_k = 2;
  auto counts = draw(cfg, kLogits, 5000);
  EXPECT_EQ(support(counts), (std::set<int32_t>{0, 3}));
  EXPECT_NEAR(counts[3] / 5000.0, 0.4 / 0.7, 0.03);
  cfg.top_k = 1;
  EXPECT_EQ(support(draw(cfg, kLogits, 200)), (std::set<int32_t>{3}));
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  SamplerConfig cfg;
  cfg.temperature = 1;
  cfg.top_p = 0.65f;  // 0.4 < 0.65 <= 0.4 + 0.3: ids 3 and 0
  EXPECT_EQ(support(draw(cfg, kLogits, 5000)), (std::set<int32_t>{0, 3}));
  cfg.top_p = 0.75f;  // needs 0.2 more: ids 3, 0, 2
  EXPECT_EQ(support(draw(cfg, kLogits, 5000)), (std::set<int32_t>{0, 2, 3}));
  cfg.top_p = 0.01f;  // at least one token survives
  EXPECT_EQ(support(draw(cfg, kLogits, 200)), (std::set<int32_t>{3}));
}

TEST(Sampler, MinPDropsTokensBelowAFractionOfTheTop) {
  SamplerConfig cfg;
  cfg.temperature = 1;
  cfg.min_p = 0.45f;  // floor 0.18: ids 3 (0.4), 0 (0.3), 2 (0.2) stay, 1 (0.1) goes
  EXPECT_EQ(support(draw(cfg, kLogits, 5000)), (std::set<int32_t>{0, 2, 3}));
  cfg.min_p = 0.8f;  // floor 0.32
  EXPECT_EQ(support(draw(cfg, kLogits, 2000)), (std::set<int32_t>{3}));
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplerConfig cfg;  // greedy
  cfg.repeat_penalty = 2.0f;
  Sampler s(cfg);
  // id 0 (3.0) repeated -> 1.5 < id 1 (2.0).
  std::vector<float> pos = {3.0f, 2.0f, 0.0f};
  EXPECT_EQ(Sampler(SamplerConfig{}).sample(pos, std::vector<int32_t>{0}), 0);
  EXPECT_EQ(s.sample(pos, std::vector<int32_t>{0, 0, 0}), 1);  // once, however often it occurs
  // id 0 (-1.0) repeated -> -2.0 < id 1 (-1.5).
  std::vector<float> neg = {-1.0f, -1.5f, -9.0f};
  EXPECT_EQ(s.sample(neg, std::vector<int32_t>{0}), 1);
  // Only the last repeat_last_n tokens count.
  cfg.repeat_last_n = 1;
  EXPECT_EQ(Sampler(cfg).sample(pos, std::vector<int32_t>{0, 2}), 0);
  EXPECT_EQ(Sampler(cfg).sample(pos, std::vector<int32_t>{2, 0}), 1);
  cfg.repeat_last_n = 0;  // disabled
  EXPECT_EQ(Sampler(cfg).sample(pos, std::vector<int32_t>{0}), 0);
  // The input logits are not modified.
  EXPECT_EQ(pos[0], 3.0f);
}

TEST(Sampler, SameSeedSameSequenceOtherSeedOtherSequence) {
  SamplerConfig cfg;
  cfg.temperature = 1;
  cfg.seed = 42;
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(std::sin(double(i)));
  auto run = [&](uint64_t seed) {
    SamplerConfig c = cfg;
    c.seed = seed;
    Sampler s(c);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(logits, {}));
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(Sampler, RejectsBadInputs) {
  SamplerConfig bad;
  bad.top_p = 0;
  EXPECT_THROW(Sampler{bad}, Error);
  bad = SamplerConfig{};
  bad.temperature = -1;
  EXPECT_THROW(Sampler{bad}, Error);
  Sampler s(SamplerConfig{});
  EXPECT_THROW(s.sample(std::vector<float>{}, {}), Error);
  std::vector<float> all_inf = {-INFINITY, -INFINITY};
  EXPECT_THROW(s.sample(all_inf, {}), Error);
  SamplerConfig pen;
  pen.repeat_penalty = 1.5f;
  EXPECT_THROW(Sampler(pen).sample(kLogits, std::vector<int32_t>{4}), Error);
}

}  // namespace
}  // namespace glm4
