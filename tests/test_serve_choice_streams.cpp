// A streamed request's chunks for n choices, without a server: every chunk names its choice, each
// choice opens with its role and ends with one finish_reason, tool-call and content deltas stay
// with their choice, and the usage totals come once at the end (one choice keeps its usage on
// the finish chunk too); a failed choice ends the stream with an error body.
#include <gtest/gtest.h>

#include <map>

#include "serve/choice_streams.h"
#include "tests/support/repo_paths.h"

namespace glm4::serve {
namespace {

const Tokenizer& tokenizer() {
  static const std::unique_ptr<Tokenizer> t = load_tokenizer(glm4::testing::kModel);
  return *t;
}

SlotEvent piece(const std::string& text, int32_t id) {
  SlotEvent e;
  e.text = text;
  e.ids = {id};
  return e;
}

SlotEvent last(const std::string& reason, int64_t prompt, int64_t tokens) {
  SlotEvent e;
  e.done = true;
  e.finish_reason = reason;
  e.prompt_tokens = prompt;
  e.completion_tokens = tokens;
  return e;
}

const ResponseMeta kChat{Endpoint::Chat, "chatcmpl-1", "m", 0};
const std::string kWeather =
    R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",)"
    R"( "properties": {"city": {"type": "string"}}}}})";

TEST(ChoiceStreams, TwoChatChoicesInterleavedKeepTheirIndexDeltasAndFinish) {
  ToolRequest t;
  t.tools = {kWeather};
  ChoiceStreams s(kChat, reply_reading(ChatFormat::Glm45, ChatOptions{}, t), 2, false, true,
                  tokenizer());
  std::vector<json> chunks = s.open();
  ASSERT_EQ(chunks.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(chunks[i]["choices"][0]["index"], i);
    EXPECT_EQ(chunks[i]["choices"][0]["delta"]["role"], "assistant");
  }
  auto add = [&](std::vector<json> more) {
    for (json& c : more) chunks.push_back(std::move(c));
  };
  add(s.push(0, piece("\n<think></think>\n<tool_call>get_weather\n", 1)));
  add(s.push(1, piece("\n<think>hm</think>\nIt is", 2)));
  add(s.push(0, piece("<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n", 3)));
  add(s.push(1, piece(" sunny.", 4)));
  EXPECT_FALSE(s.all_finished());
  add(s.push(1, last("stop", 9, 3)));
  EXPECT_TRUE(s.finished(1) && !s.finished(0));
  add(s.push(0, piece("</tool_call>", 5)));
  add(s.push(0, last("stop", 9, 4)));
  ASSERT_TRUE(s.all_finished());
  EXPECT_FALSE(s.failed());
  EXPECT_EQ(s.completion_tokens(), 7);
  EXPECT_EQ(s.finish_reason(), "tool_calls");

  std::map<int, std::string> content, reasoning, arguments, finish;
  std::map<int, int> finishes;
  for (const json& c : chunks) {
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_FALSE(c.contains("usage")) << c.dump();  // several choices: the totals come once
    ASSERT_EQ(c["choices"].size(), 1u);
    const json& ch = c["choices"][0];
    const int i = ch["index"].get<int>();
    content[i] += ch["delta"].value("content", "");
    reasoning[i] += ch["delta"].value("reasoning_content", "");
    for (const json& call : ch["delta"].value("tool_calls", json::array()))
      arguments[i] += call["function"]["arguments"].get<std::string>();
    if (!ch["finish_reason"].is_null()) {
      ++finishes[i];
      finish[i] = ch["finish_reason"];
    }
  }
  EXPECT_EQ(content[0], "");
  EXPECT_EQ(arguments[0], R"({"city": "Paris"})");
  EXPECT_EQ(finish[0], "tool_calls");
  EXPECT_EQ(content[1], "It is sunny.");
  EXPECT_EQ(reasoning[1], "hm");
  EXPECT_EQ(arguments[1], "");
  EXPECT_EQ(finish[1], "stop");
  EXPECT_EQ(finishes[0], 1);
  EXPECT_EQ(finishes[1], 1);

  const std::vector<json> end = s.close();
  ASSERT_EQ(end.size(), 1u);
  EXPECT_TRUE(end[0]["choices"].empty());
  EXPECT_EQ(end[0]["usage"]["prompt_tokens"], 9);  // the prompt once
  EXPECT_EQ(end[0]["usage"]["completion_tokens"], 7);
  EXPECT_EQ(end[0]["usage"]["total_tokens"], 16);
}

TEST(ChoiceStreams, OneCompletionChoiceCarriesUsageOnItsFinishChunk) {
  ChoiceStreams s({Endpoint::Completion, "cmpl-1", "m", 0}, ReplyReading{}, 1, false, false,
                  tokenizer());
  EXPECT_TRUE(s.open().empty());  // completions have no role chunk
  std::vector<json> a = s.push(0, piece("Once", 1));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0]["choices"][0]["text"], "Once");
  EXPECT_EQ(a[0]["choices"][0]["index"], 0);
  std::vector<json> b = s.push(0, last("length", 4, 2));
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(b[0]["usage"]["total_tokens"], 6);
  EXPECT_TRUE(s.close().empty());  // include_usage not asked for
}

TEST(ChoiceStreams, AFailedChoiceEndsTheStreamWithAnErrorBody) {
  ChoiceStreams s({Endpoint::Completion, "cmpl-1", "m", 0}, ReplyReading{}, 3, false, true,
                  tokenizer());
  s.push(1, piece("a", 1));
  SlotEvent failed = last("error", 4, 1);
  failed.error = "out of memory";
  const std::vector<json> out = s.push(2, failed);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0]["error"]["message"].get<std::string>().find("out of memory"), std::string::npos);
  EXPECT_TRUE(s.failed());
  EXPECT_FALSE(s.all_finished());
  EXPECT_EQ(s.finish_reason(), "error");
}

// A GLM-4-0414 reply that answers, then calls in a new <|assistant|> turn (the scheduler marks
// the turn token; its text is empty): the stream gives the text as content and the call as a
// tool call, and finishes with tool_calls.
TEST(ChoiceStreams, Glm4TextThenACallInANewTurn) {
  ToolRequest t;
  t.tools = {kWeather};
  ChoiceStreams s(kChat, reply_reading(ChatFormat::Glm40414, ChatOptions{}, t), 1, false, true,
                  tokenizer());
  std::vector<json> chunks = s.open();
  auto add = [&](std::vector<json> more) {
    for (json& c : more) chunks.push_back(std::move(c));
  };
  add(s.push(0, piece("\nLet me check.", 1)));
  SlotEvent turn = piece("", 2);
  turn.new_turn = true;
  add(s.push(0, turn));
  add(s.push(0, piece("get_weather \n{\"city\": \"Oslo\"}", 3)));
  add(s.push(0, last("stop", 9, 3)));
  std::string content, name, arguments;
  for (const json& c : chunks) {
    if (!c.contains("choices") || c["choices"].empty()) continue;
    const json& d = c["choices"][0]["delta"];
    content += d.value("content", "");
    for (const json& call : d.value("tool_calls", json::array())) {
      if (call["function"].contains("name")) name += call["function"]["name"].get<std::string>();
      arguments += call["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(content, "Let me check.");
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(arguments, "{\"city\": \"Oslo\"}");
  EXPECT_EQ(s.finish_reason(), "tool_calls");
}

}  // namespace
}  // namespace glm4::serve
