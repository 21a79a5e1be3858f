// tool_choice "auto" in the server: a chat request with tools carries the call grammar and the
// format's call opening to its slot, and the scheduler masks a call the model opens as a
// Generator with the same watch does alone (the call's text is a tool's name and arguments that
// follow its schema), batched beside an unconstrained request.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "infer/generator.h"
#include "serve/openai_schema.h"
#include "serve/scheduler.h"
#include "tests/support/repo_paths.h"

namespace glm4::serve {
namespace {

using glm4::testing::kModel;
using namespace std::chrono_literals;

const std::string kBody = R"({"messages": [{"role": "user", "content": "Weather in Oslo?"}],
  "temperature": 0, "max_tokens": 80, "tools": [{"type": "function", "function":
  {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"enum":
  ["Oslo", "Rome"]}, "days": {"type": "integer"}}, "required": ["city"]}}}])";

struct Served {
  Served() : model(load_model(kModel)), tokenizer(load_tokenizer(kModel)) {
    s.model = model.get();
    s.tokenizer = tokenizer.get();
    s.format = detect_chat_format(*tokenizer, kModel);  // glm4-0414: config.json says glm4
    s.base_name = "base";
    s.eos_ids = {3};
    s.chat_stop_ids = stop_ids(*tokenizer, s.format);
  }
  std::unique_ptr<Glm4Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  ServedModels s;
};

std::vector<int32_t> drain(SlotHandle& h, std::string* text) {
  std::vector<int32_t> ids;
  for (SlotEvent e;;) {
    if (!h.next(&e, 100ms)) continue;
    ids.insert(ids.end(), e.ids.begin(), e.ids.end());
    if (text) *text += e.text;
    if (e.done) return ids;
  }
}

TEST(ServeAutoCalls, RequestCarriesTheCallGrammarOnlyUnderAuto) {
  Served sv;
  ASSERT_EQ(sv.s.format, ChatFormat::Glm40414);
  const SlotRequest r = build_slot_request(parse_request(kBody + "}", Endpoint::Chat), sv.s, 1);
  ASSERT_NE(r.call_grammar, nullptr);
  ASSERT_NE(r.token_trie, nullptr);  // built for the request: the server had none
  EXPECT_EQ(r.grammar, nullptr);
  EXPECT_TRUE(r.call_opening.at_turn_start);
  EXPECT_EQ(r.call_opening.turn_ids,
            std::vector<int32_t>{*sv.tokenizer->special_id("<|assistant|>")});
  const SlotRequest none = build_slot_request(
      parse_request(kBody + R"(, "tool_choice": "none"})", Endpoint::Chat), sv.s, 1);
  EXPECT_EQ(none.call_grammar, nullptr);
  EXPECT_EQ(none.token_trie, nullptr);
}

TEST(ServeAutoCalls, OpenedCallIsMaskedInTheBatchAsByAGenerator) {
  Served sv;
  SlotRequest r = build_slot_request(parse_request(kBody + "}", Endpoint::Chat), sv.s, 1);
  // The untrained model does not open calls by itself: take its first greedy token as the
  // opening, so the call starts right after it and every later token is masked (the call is the
  // GLM-4 turn: after it, only the end or the next turn).
  GenerationConfig config;
  config.max_tokens = int(r.max_tokens);
  config.sampling = r.sampling;
  config.stop_ids = r.stop_ids;
  Generator free_gen(*sv.model, config);
  free_gen.start(r.prompt);
  const int32_t first = *free_gen.next();
  r.call_opening.opening = r.token_trie->bytes(first);

  Scheduler scheduler(*sv.model, sv.tokenizer.get(), SchedulerConfig{});
  Scheduler::Admission a;
  auto constrained = scheduler.submit(r, &a);
  SlotRequest plain = r;
  plain.call_grammar = nullptr;
  auto unconstrained = scheduler.submit(plain, &a);
  ASSERT_TRUE(constrained && unconstrained);
  std::string text;
  const std::vector<int32_t> ids = drain(*constrained, &text);
  const std::vector<int32_t> free_ids = drain(*unconstrained, nullptr);

  Generator gen(*sv.model, config);
  gen.set_call_watch(std::make_shared<grammar::CallWatch>(r.call_grammar, r.token_trie, r.stop_ids,
                                                          r.call_opening));
  gen.start(r.prompt);
  std::vector<int32_t> want;
  while (auto t = gen.next()) want.push_back(*t);
  EXPECT_EQ(ids, want);
  EXPECT_NE(ids, free_ids);  // the watch changed the reply

  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], first);
  const std::string call =
      sv.tokenizer->decode(std::vector<int32_t>(ids.begin() + 1, ids.end()), true);
  ASSERT_EQ(call.rfind("get_weather \n", 0), 0u) << call;  // GLM-4-0414's call line
  nlohmann::json args;
  ASSERT_NO_THROW(args = nlohmann::json::parse(call.substr(13))) << call;
  EXPECT_TRUE(args.at("city") == "Oslo" || args.at("city") == "Rome") << call;
  if (args.contains("days")) {
    EXPECT_TRUE(args["days"].is_number_integer()) << call;
  }
}

}  // namespace
}  // namespace glm4::serve
