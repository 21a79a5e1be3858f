// Generation on the tiny fixture models: greedy ids equal the reference's, cached decoding
// equals full recomputation at every step, batched = one by one, append = fresh start on the
// concatenation, the KV window bound holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "autograd/node.h"
#include "base/check.h"
#include "infer/generator.h"
#include "io/safetensors.h"
#include "tests/support/cached_decode.h"
#include "tests/support/fixture_logits.h"

namespace glm4 {
namespace {

std::string dir_of(const std::string& name) { return std::string(GLM4_TEST_DATA) + "/" + name; }

std::vector<int32_t> read_ids(const std::string& name, const std::string& key) {
  auto file = SafetensorsFile::open(dir_of(name) + "/fixture.safetensors");
  std::vector<int32_t> out;
  for (int64_t v : read_int(file->at(key))) out.push_back(int32_t(v));
  return out;
}

using testing::max_relative_error;
using testing::recompute_last;

std::vector<int32_t> generate(const Glm4Model& model, const std::vector<int32_t>& prompt,
                              GenerationConfig cfg) {
  Generator gen(model, cfg);
  gen.start(prompt);
  std::vector<int32_t> out;
  while (auto t = gen.next()) out.push_back(*t);
  return out;
}

class GreedyGeneration : public ::testing::TestWithParam<std::string> {};

TEST_P(GreedyGeneration, MatchesTheReferenceGreedyIds) {
  auto model = load_model(dir_of(GetParam()));
  std::vector<int32_t> prompt = read_ids(GetParam(), "greedy_prompt"),
                       want = read_ids(GetParam(), "greedy_ids");
  GenerationConfig cfg;
  cfg.max_tokens = int(want.size());
  Generator gen(*model, cfg);
  gen.start(prompt);
  std::vector<int32_t> got;
  while (auto t = gen.next()) got.push_back(*t);
  EXPECT_EQ(got, want);
  Generator::Stats s = gen.stats();
  EXPECT_EQ(s.prompt_tokens, int64_t(prompt.size()));
  EXPECT_EQ(s.generated_tokens, int64_t(want.size()));
  // The last token drawn is never fed: the cache holds everything before it.
  EXPECT_EQ(gen.cache_length(), int64_t(prompt.size() + want.size()) - 1);
  EXPECT_FALSE(gen.next().has_value());
}

INSTANTIATE_TEST_SUITE_P(Families, GreedyGeneration,
                         ::testing::Values("tiny_glm4", "tiny_glm", "tiny_chatglm",
                                           "tiny_glm4_bf16", "tiny_glm4_q"));

class CachedDecoding : public ::testing::TestWithParam<std::string> {};

TEST_P(CachedDecoding, EqualsFullRecomputationAtEveryStep) {
  auto model = load_model(dir_of(GetParam()));
  std::vector<int32_t> prompt = read_ids(GetParam(), "greedy_prompt");
  for (int64_t chunk : {int64_t(512), int64_t(3), int64_t(1)}) {
    GenerationConfig cfg;
    cfg.max_tokens = 24;
    cfg.prefill_chunk = chunk;
    cfg.sampling.temperature = 0.8f;  // a sampled path, so the test does not lean on the fixture
    cfg.sampling.seed = 5;
    Generator gen(*model, cfg);
    gen.start(prompt);
    std::vector<int32_t> seq = prompt;
    EXPECT_LE(max_relative_error(gen.last_logits(), recompute_last(*model, seq)), 1e-5)
        << "prefill, chunk " << chunk;
    int steps = 0;
    while (auto t = gen.next()) {
      // last_logits() is what this token was drawn from: the logits after seq.
      EXPECT_LE(max_relative_error(gen.last_logits(), recompute_last(*model, seq)), 1e-5)
          << "step " << steps << ", chunk " << chunk;
      seq.push_back(*t);
      ++steps;
    }
    EXPECT_EQ(steps, cfg.max_tokens);
    EXPECT_EQ(gen.history(), seq);
  }
}

// With the cache in bf16 (--kv-cache bf16) each cached key and value is rounded to 8 bits of
// mantissa: the logits stay within two bf16 steps of the largest of full recomputation's at every
// step, and do move.
TEST_P(CachedDecoding, ABf16CacheStaysWithinItsRounding) {
  auto model = load_model(dir_of(GetParam()));
  const std::vector<int32_t> prompt = read_ids(GetParam(), "greedy_prompt");
  for (int64_t chunk : {int64_t(512), int64_t(3)}) {
    GenerationConfig cfg;
    cfg.max_tokens = 16;
    cfg.prefill_chunk = chunk;
    cfg.kv_cache_dtype = DType::BF16;
    cfg.sampling.temperature = 0.8f;
    cfg.sampling.seed = 5;
    EXPECT_EQ(Generator(*model, cfg).cache().dtype(), DType::BF16);
    const testing::CachedDecodeGap gap = testing::cached_decode_gap(*model, prompt, cfg);
    EXPECT_EQ(gap.drawn, cfg.max_tokens);
    EXPECT_LE(gap.worst, std::ldexp(gap.largest, -7)) << "chunk " << chunk;
    EXPECT_GT(gap.worst, 1e-5) << "chunk " << chunk << ": the bf16 cache changed nothing";
  }
}

INSTANTIATE_TEST_SUITE_P(Families, CachedDecoding,
                         ::testing::Values("tiny_glm4", "tiny_chatglm", "tiny_glm4_q"));

TEST(BatchGeneration, LeftPaddedBatchEqualsOneByOne) {
  for (const char* name : {"tiny_glm4", "tiny_chatglm"}) {
    auto model = load_model(dir_of(name));
    std::vector<int32_t> base = read_ids(name, "greedy_prompt");
    std::vector<std::vector<int32_t>> prompts = {
        base, {base.begin(), base.begin() + 2}, {7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}, {300}};
    GenerationConfig cfg;
    cfg.max_tokens = 30;
    cfg.prefill_chunk = 4;  // the padded block is prefilled in column chunks too
    std::vector<std::vector<int32_t>> alone;
    for (const auto& p : prompts) alone.push_back(generate(*model, p, cfg));
    EXPECT_EQ(generate_batch(*model, prompts, cfg), alone) << name;

    // Rows stop independently: a stop id drawn early by one row ends only that row.
    cfg.stop_ids = {alone[1][5], alone[2][12]};
    std::vector<std::vector<int32_t>> alone_stop;
    for (const auto& p : prompts) alone_stop.push_back(generate(*model, p, cfg));
    EXPECT_LE(alone_stop[1].size(), 5u);
    EXPECT_LE(alone_stop[2].size(), 12u);
    EXPECT_EQ(generate_batch(*model, prompts, cfg), alone_stop) << name;
  }
}

// drawable_ids (the tokenizer's vocabulary, when the embedding is padded past it): no id at or
// above it is drawn, greedy or sampled, alone or batched; below it the choice is the argmax of
// the ids that remain.
TEST(DrawableIds, IdsPastTheTokenizersVocabularyAreNeverDrawn) {
  auto model = load_model(dir_of("tiny_glm4"));
  const std::vector<int32_t> prompt = read_ids("tiny_glm4", "greedy_prompt");
  GenerationConfig cfg;
  cfg.max_tokens = 1;
  const int32_t free_choice = generate(*model, prompt, cfg).at(0);
  ASSERT_GT(free_choice, 0) << "the limit below needs a greedy id above 0";
  cfg.drawable_ids = free_choice;  // the greedy id and every id above it are off limits
  Generator gen(*model, cfg);
  gen.start(prompt);
  const std::vector<float>& logits = gen.last_logits();
  const int32_t want =
      int32_t(std::max_element(logits.begin(), logits.begin() + free_choice) - logits.begin());
  EXPECT_EQ(gen.next(), std::optional<int32_t>(want));
  EXPECT_EQ(generate_batch(*model, {prompt}, cfg), std::vector<std::vector<int32_t>>{{want}});

  cfg.max_tokens = 40;
  cfg.drawable_ids = 50;
  cfg.sampling.temperature = 1.5f;
  for (uint64_t seed = 0; seed < 3; ++seed) {
    cfg.sampling.seed = seed;
    for (int32_t id : generate(*model, prompt, cfg)) EXPECT_LT(id, 50) << "seed " << seed;
  }
}

TEST(MultiTurn, AppendEqualsAFreshStartOnTheConcatenation) {
  auto model = load_model(dir_of("tiny_glm4"));
  std::vector<int32_t> turn1 = read_ids("tiny_glm4", "greedy_prompt"), turn2 = {400, 401, 17, 3};
  GenerationConfig cfg;
  cfg.max_tokens = 10;
  cfg.prefill_chunk = 3;
  Generator gen(*model, cfg);
  gen.start(turn1);
  std::vector<int32_t> reply1;
  while (auto t = gen.next()) reply1.push_back(*t);
  ASSERT_EQ(reply1.size(), 10u);
  gen.append(turn2);
  std::vector<float> logits_after_append = gen.last_logits();
  std::vector<int32_t> reply2;
  while (auto t = gen.next()) reply2.push_back(*t);

  std::vector<int32_t> all = turn1;
  all.insert(all.end(), reply1.begin(), reply1.end());
  all.insert(all.end(), turn2.begin(), turn2.end());
  Generator fresh(*model, cfg);
  fresh.start(all);
  EXPECT_LE(max_relative_error(logits_after_append, fresh.last_logits()), 1e-5);
  std::vector<int32_t> reply_fresh;
  while (auto t = fresh.next()) reply_fresh.push_back(*t);
  EXPECT_EQ(reply2, reply_fresh);
  EXPECT_EQ(gen.cache_length(), fresh.cache_length());
  EXPECT_EQ(gen.stats().prompt_tokens, int64_t(turn1.size() + turn2.size()));
}

TEST(KvWindow, GenerationRunsPastTheWindowWithinTheBound) {
  auto model = load_model(dir_of("tiny_glm4"));
  std::vector<int32_t> prompt = read_ids("tiny_glm4", "greedy_prompt");
  GenerationConfig unbounded;
  unbounded.max_tokens = 60;
  std::vector<int32_t> full = generate(*model, prompt, unbounded);

  GenerationConfig cfg = unbounded;
  cfg.max_kv_size = 16;
  cfg.prefill_chunk = 5;
  Generator gen(*model, cfg);
  gen.start(prompt);
  std::vector<int32_t> got;
  int64_t longest = gen.cache_length();
  while (auto t = gen.next()) {
    got.push_back(*t);
    longest = std::max(longest, gen.cache_length());
    EXPECT_EQ(gen.next_position(), int64_t(prompt.size() + got.size()) - 1);  // absolute positions
  }
  EXPECT_EQ(got.size(), 60u);
  EXPECT_EQ(longest, 16);
  // Until the window first fills (16 tokens fed), nothing differs from unbounded decoding.
  const size_t same = 16 - prompt.size() + 1;
  EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + same),
            std::vector<int32_t>(full.begin(), full.begin() + same));

  // Batched generation honours the window too (it keeps the padding as well).
  std::vector<std::vector<int32_t>> prompts = {prompt, {1, 2}};
  auto rows = generate_batch(*model, prompts, cfg);
  EXPECT_EQ(rows[0].size(), 60u);
  EXPECT_EQ(rows[1].size(), 60u);
}

// With keep_first = 0 the window holds the most recent tokens: a token fed in a chunk starting at
// index c, when the cache held L tokens after eviction, sees keys [c - L, itself]. The same
// visibility in one plain forward over the whole sequence (per-query lower bounds through the
// mask's seg_start) must give the logits every token was drawn from.
TEST(KvWindow, SlidingWindowEqualsAMaskedFullForward) {
  auto model = load_model(dir_of("tiny_glm4"));
  std::vector<int32_t> prompt = read_ids("tiny_glm4", "greedy_prompt");
  GenerationConfig cfg;
  cfg.max_tokens = 40;
  cfg.max_kv_size = 12;
  cfg.keep_first = 0;
  cfg.prefill_chunk = 5;
  cfg.sampling.temperature = 0.8f;
  cfg.sampling.seed = 3;
  Generator gen(*model, cfg);
  gen.start(prompt);
  std::vector<int32_t> seq = prompt;
  std::vector<std::vector<float>> drawn_from;
  while (auto t = gen.next()) {
    drawn_from.push_back(gen.last_logits());
    seq.push_back(*t);
  }
  ASSERT_EQ(drawn_from.size(), 40u);

  // The feeding schedule: the prompt in chunks of 5, then one token per step.
  const int64_t N = int64_t(seq.size()) - 1, W = cfg.max_kv_size;  // the last token is never fed
  std::vector<int32_t> lowest(static_cast<size_t>(N));
  int64_t cached = 0;
  for (int64_t c = 0; c < N;) {
    const int64_t T =
        c < int64_t(prompt.size()) ? std::min<int64_t>(5, int64_t(prompt.size()) - c) : 1;
    if (cached + T > W) cached = W - T;
    for (int64_t t = c; t < c + T; ++t) lowest[size_t(t)] = int32_t(c - cached);
    cached += T;
    c += T;
  }
  EXPECT_GT(lowest.back(), 0);  // the window did slide
  NoGradGuard no_grad;
  ForwardContext ctx;
  ctx.seq = N;
  for (int64_t t = 0; t < N; ++t) ctx.positions.push_back(int32_t(t));
  ctx.mask.seg_start = lowest;
  std::vector<int32_t> fed(seq.begin(), seq.begin() + N);
  Tensor logits = model->logits(model->forward_hidden(fed, ctx), ctx);  // [1, N, V]
  const int64_t V = model->config.vocab_size;
  for (size_t i = 0; i < drawn_from.size(); ++i) {
    const float* row = logits.data() + (int64_t(prompt.size()) - 1 + int64_t(i)) * V;
    EXPECT_LE(max_relative_error(drawn_from[i], std::vector<float>(row, row + V)), 1e-5)
        << "token " << i;
  }
}

TEST(GenerateErrors, BadArgumentsThrow) {
  auto model = load_model(dir_of("tiny_glm4"));
  GenerationConfig cfg;
  Generator gen(*model, cfg);
  EXPECT_THROW(gen.next(), Error);
  EXPECT_THROW(gen.start(std::vector<int32_t>{}), Error);
  EXPECT_THROW(gen.start(std::vector<int32_t>{1, 512}), Error);
  // A bad token in append() leaves the generator usable.
  gen.start(std::vector<int32_t>{1, 2, 3});
  ASSERT_TRUE(gen.next().has_value());
  EXPECT_THROW(gen.append(std::vector<int32_t>{-1}), Error);
  gen.append(std::vector<int32_t>{4});
  EXPECT_TRUE(gen.next().has_value());
  cfg.max_kv_size = 4;  // not more than keep_first
  EXPECT_THROW(Generator(*model, cfg), Error);
  cfg = GenerationConfig{};
  EXPECT_THROW(generate_batch(*model, {{1, 2}, {}}, cfg), Error);
}

}  // namespace
}  // namespace glm4
