// The server's batch scheduler without HTTP: concurrent requests (mixed adapters, lengths,
// sampling) give what each gives alone through Generator; stop strings across token boundaries;
// logprobs; the bounded queue; cancellation and draining free every slot.
#include <gtest/gtest.h>

#include <cmath>

#include "infer/generator.h"
#include "model/adapter/adapter_io.h"
#include "serve/scheduler.h"
#include "serve/stop_text.h"
#include "tests/support/random_adapter.h"
#include "tests/support/repo_paths.h"
#include "tests/support/temp_dir.h"

namespace glm4::serve {
namespace {

using glm4::testing::TempDir;
using namespace std::chrono_literals;

const std::string kTiny = std::string(GLM4_TEST_DATA) + "/tiny_glm4";
using glm4::testing::kModel;

struct Reply {
  std::vector<int32_t> ids;
  std::string text, finish_reason;
  std::vector<TokenLogprob> logprobs;
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

Reply collect(SlotHandle& h) {
  Reply r;
  SlotEvent e;
  for (;;) {
    if (!h.next(&e, 100ms)) continue;
    r.ids.insert(r.ids.end(), e.ids.begin(), e.ids.end());
    r.text += e.text;
    for (auto& lp : e.logprobs) r.logprobs.push_back(lp);
    if (e.done) break;
  }
  r.finish_reason = e.finish_reason;
  r.prompt_tokens = e.prompt_tokens;
  r.completion_tokens = e.completion_tokens;
  return r;
}

std::shared_ptr<SlotHandle> submit(Scheduler& s, SlotRequest r) {
  Scheduler::Admission a;
  auto h = s.submit(std::move(r), &a);
  EXPECT_EQ(a, Scheduler::Admission::Accepted);
  return h;
}

// The loop updates its counts just after it sent the final events: wait for that.
bool idle_soon(const Scheduler& s) {
  for (int i = 0; i < 500; ++i) {
    if (s.stats().live + s.stats().queued == 0) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

std::vector<int32_t> alone(const Glm4Model& m, const SlotRequest& r) {
  GenerationConfig cfg;
  cfg.max_tokens = int(r.max_tokens);
  cfg.sampling = r.sampling;
  cfg.stop_ids = r.stop_ids;
  cfg.prefill_chunk =
      7;  // the scheduler below feeds prompts in chunks of 5: chunking changes nothing
  Generator g(m, cfg);
  g.start(r.prompt);
  std::vector<int32_t> out;
  while (auto t = g.next()) out.push_back(*t);
  return out;
}

TEST(StopText, MatchesAcrossPiecesAndHoldsBackOnlyPossibleStarts) {
  StopText s({"o W", "xyz"});
  EXPECT_EQ(s.push("Hel"), "Hel");
  EXPECT_EQ(s.push("lo"), "l");  // "o" may start "o W"
  EXPECT_EQ(s.push(" Wor"), "");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.push("ld"), "");

  StopText t({"abc"});
  EXPECT_EQ(t.push("xab"), "x");
  EXPECT_EQ(t.push("d"), "abd");
  EXPECT_EQ(t.push("ab"), "");
  EXPECT_EQ(t.flush(), "ab");  // no match by the end: nothing is lost
  EXPECT_FALSE(t.stopped());

  StopText none({});
  EXPECT_EQ(none.push("anything"), "anything");
}

TEST(Scheduler, ConcurrentRequestsEqualEachAloneWithMixedAdaptersAndSampling) {
  TempDir dir;
  LoraConfig l;
  l.rank = 4;
  l.alpha = 8;
  l.targets = {"all-linear"};
  glm4::testing::write_random_adapter(kTiny, dir / "a", l, 21);
  l.targets = {"q_proj", "v_proj", "down_proj"};
  glm4::testing::write_random_adapter(kTiny, dir / "b", l, 22);
  auto routed = load_model(kTiny);
  load_resident_adapter(*routed, dir / "a", 0, kTiny);
  load_resident_adapter(*routed, dir / "b", 1, kTiny);
  std::vector<std::unique_ptr<Glm4Model>> live;  // base, a, b, each the only adapter of its model
  live.push_back(load_model(kTiny));
  for (const char* n : {"a", "b"}) {
    live.push_back(load_model(kTiny));
    load_adapter(*live.back(), dir / n, kTiny);
  }

  std::vector<SlotRequest> requests;
  for (int i = 0; i < 9; ++i) {
    SlotRequest r;
    for (int t = 0; t < 3 + 4 * i; ++t) r.prompt.push_back(int32_t((t * 31 + i * 7 + 1) % 509));
    r.adapter = int32_t(i % 3) - 1;
    r.max_tokens = 6 + 5 * (i % 4);
    r.stop_ids = {509, 510};
    if (i % 2) {
      r.sampling.temperature = 0.9f;
      r.sampling.top_p = 0.95f;
      r.sampling.seed = uint64_t(100 + i);
    }
    if (i == 4) r.sampling.repeat_penalty = 1.3f;
    requests.push_back(r);
  }
  SchedulerConfig sc;
  sc.max_batch = 4;  // fewer slots than requests: some wait in the queue and join later
  sc.prefill_chunk = 5;
  Scheduler s(*routed, nullptr, sc);
  std::vector<std::shared_ptr<SlotHandle>> handles;
  for (const SlotRequest& r : requests) handles.push_back(submit(s, r));
  for (size_t i = 0; i < requests.size(); ++i) {
    Reply got = collect(*handles[i]);
    std::vector<int32_t> want = alone(*live[size_t(requests[i].adapter + 1)], requests[i]);
    EXPECT_EQ(got.ids, want) << "request " << i;
    EXPECT_EQ(got.prompt_tokens, int64_t(requests[i].prompt.size()));
    EXPECT_EQ(got.completion_tokens, int64_t(want.size()));
    EXPECT_EQ(got.finish_reason, int64_t(want.size()) < requests[i].max_tokens ? "stop" : "length")
        << i;
  }
  EXPECT_GT(s.stats().rows, s.stats().steps);  // rows really were batched
  EXPECT_TRUE(idle_soon(s));
}

TEST(Scheduler, AKvWindowGivesWhatGenerateGivesWithTheSameWindow) {
  auto model = load_model(kTiny);
  SchedulerConfig sc;
  sc.max_kv_size = 24;  // --max-kv-size: the first 4 tokens and the most recent ones
  sc.prefill_chunk = 8;
  Scheduler s(*model, nullptr, sc);
  std::vector<SlotRequest> requests(3);
  std::vector<std::shared_ptr<SlotHandle>> handles;
  for (int i = 0; i < 3; ++i) {
    for (int t = 0; t < 30 + 7 * i; ++t)
      requests[size_t(i)].prompt.push_back(int32_t((t * 13 + i) % 509));
    requests[size_t(i)].max_tokens = 40;
    handles.push_back(submit(s, requests[size_t(i)]));
  }
  for (int i = 0; i < 3; ++i) {
    GenerationConfig cfg;
    cfg.max_tokens = 40;
    cfg.max_kv_size = 24;
    cfg.prefill_chunk = 8;
    Generator g(*model, cfg);
    g.start(requests[size_t(i)].prompt);
    std::vector<int32_t> want;
    while (auto t = g.next()) want.push_back(*t);
    EXPECT_EQ(collect(*handles[size_t(i)]).ids, want) << "request " << i;
  }
}

// serve --kv-cache bf16, with a window, on a latent-attention model and on a GLM-4 one (keys and
// values): each reply's tokens and log-probabilities are those of generate with the same cache
// and window, which differ from an fp32 cache's.
class SchedulerBf16Cache : public ::testing::TestWithParam<std::string> {};

TEST_P(SchedulerBf16Cache, GivesWhatGenerateGivesWithIt) {
  auto model = load_model(GetParam());
  SchedulerConfig sc;
  sc.max_kv_size = 20;
  sc.prefill_chunk = 8;
  sc.kv_cache_dtype = DType::BF16;
  Scheduler s(*model, nullptr, sc);
  SlotRequest r;
  for (int t = 0; t < 26; ++t) r.prompt.push_back(int32_t((t * 11 + 3) % 250));
  r.max_tokens = 12;
  r.top_logprobs = 0;
  const Reply got = collect(*submit(s, r));
  ASSERT_EQ(got.logprobs.size(), 12u);
  // Generate's log-probability of each drawn token, from the logits it was drawn from.
  auto generate = [&](DType cache) {
    GenerationConfig cfg;
    cfg.max_tokens = 12;
    cfg.max_kv_size = 20;
    cfg.prefill_chunk = 8;
    cfg.kv_cache_dtype = cache;
    Generator g(*model, cfg);
    g.start(r.prompt);
    std::vector<float> logprobs;
    while (auto t = g.next()) {
      const std::vector<float>& z = g.last_logits();
      const float top = *std::max_element(z.begin(), z.end());
      double total = 0;
      for (float v : z) total += std::exp(double(v - top));
      logprobs.push_back(float(double(z[size_t(*t)] - top) - std::log(total)));
    }
    return logprobs;
  };
  const std::vector<float> bf16 = generate(DType::BF16), f32 = generate(DType::F32);
  ASSERT_EQ(bf16.size(), 12u);
  double same = 0, apart = 0;
  for (size_t i = 0; i < 12; ++i) {
    same = std::max(same, double(std::abs(got.logprobs[i].logprob - bf16[i])));
    if (i < f32.size()) apart = std::max(apart, double(std::abs(got.logprobs[i].logprob - f32[i])));
  }
  EXPECT_LE(same, 1e-5);
  EXPECT_GT(apart, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Models, SchedulerBf16Cache,
                         ::testing::Values(std::string(GLM4_TEST_DATA) + "/moe_lite/tiny_lite",
                                           std::string(kModel)));

TEST(Scheduler, StopStringsCutTheTextAcrossTokensAndLogprobsComeFromTheRawLogits) {
  auto model = load_model(kModel);
  auto tok = load_tokenizer(kModel);
  Scheduler s(*model, tok.get(), {});
  SlotRequest r;
  r.prompt = tok->encode("The king said", false);
  r.max_tokens = 40;
  r.top_logprobs = 3;
  Reply plain = collect(*submit(s, r));
  ASSERT_EQ(plain.ids.size(), 40u);
  EXPECT_EQ(plain.text, tok->decode(plain.ids, true));
  ASSERT_EQ(plain.logprobs.size(), 40u);
  for (size_t i = 0; i < plain.logprobs.size(); ++i) {
    const TokenLogprob& lp = plain.logprobs[i];
    ASSERT_EQ(lp.top.size(), 3u);
    EXPECT_EQ(lp.top[0].id, plain.ids[i]);  // greedy: the drawn token is the most likely one
    EXPECT_FLOAT_EQ(lp.top[0].logprob, lp.logprob);
    EXPECT_LE(lp.logprob, 0.0f);
    EXPECT_GE(lp.top[0].logprob, lp.top[1].logprob);
    EXPECT_LE(
        std::exp(lp.top[0].logprob) + std::exp(lp.top[1].logprob) + std::exp(lp.top[2].logprob),
        1.0001);
  }
  // A stop string from the last character before token i into token i's text.
  size_t cut = 0;
  std::string stop;
  auto text_of = [&](size_t n) {
    return tok->decode(std::vector<int32_t>(plain.ids.begin(), plain.ids.begin() + long(n)), true);
  };
  for (size_t i = 3; i < plain.ids.size() && stop.empty(); ++i) {
    const size_t before = text_of(i).size(), after = text_of(i + 1).size();
    if (before == 0 || after < before + 2) continue;
    const std::string candidate = plain.text.substr(before - 1, 3);
    if (plain.text.find(candidate) != before - 1) continue;
    cut = before - 1;
    stop = candidate;
  }
  ASSERT_FALSE(stop.empty());
  r.stop = {stop};
  r.top_logprobs = -1;
  Reply stopped = collect(*submit(s, r));
  EXPECT_EQ(stopped.finish_reason, "stop");
  EXPECT_EQ(stopped.text, plain.text.substr(0, cut));
  EXPECT_LT(stopped.ids.size(), plain.ids.size());
  EXPECT_TRUE(stopped.logprobs.empty());
}

TEST(Scheduler, BoundedQueueCancellationAndDrainFreeEverySlot) {
  auto model = load_model(kModel);  // slow enough that 900 tokens are still running below
  SchedulerConfig sc;
  sc.max_batch = 1;
  sc.max_queue = 1;
  auto s = std::make_unique<Scheduler>(*model, nullptr, sc);
  SlotRequest r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 900;  // long enough to still be running below
  auto first = submit(*s, r);
  auto second = submit(*s, r);
  Scheduler::Admission a;
  EXPECT_EQ(s->submit(r, &a), nullptr);
  EXPECT_EQ(a, Scheduler::Admission::QueueFull);

  SlotEvent e;
  ASSERT_TRUE(first->next(&e, 10s));  // first is live and drawing
  first->cancel();
  second->cancel();
  Reply f = collect(*first), g = collect(*second);
  EXPECT_EQ(f.finish_reason, "cancelled");
  EXPECT_LT(f.completion_tokens, 900);
  EXPECT_EQ(g.finish_reason, "cancelled");
  EXPECT_TRUE(idle_soon(*s));

  // Draining lets an in-flight request finish, then refuses new ones.
  r.max_tokens = 20;
  auto third = submit(*s, r);
  s->drain(10s);
  EXPECT_EQ(collect(*third).finish_reason, "length");
  EXPECT_EQ(s->submit(r, &a), nullptr);
  EXPECT_EQ(a, Scheduler::Admission::Draining);
  EXPECT_TRUE(s->stats().draining);

  // A drain whose grace ran out cancels what is left; destroying a busy scheduler cancels too.
  auto busy = std::make_unique<Scheduler>(*model, nullptr, sc);
  r.max_tokens = 900;
  auto long_one = submit(*busy, r);
  busy->drain(0ms);
  EXPECT_EQ(collect(*long_one).finish_reason, "cancelled");
  auto other = std::make_unique<Scheduler>(*model, nullptr, sc);
  auto running = submit(*other, r);
  other.reset();
  EXPECT_EQ(collect(*running).finish_reason, "cancelled");
}

}  // namespace
}  // namespace glm4::serve
