// Tool conversations in the chat formats beyond the fixtures: which tokens are training targets
// (the assistant's text, reasoning and calls) and which are tool results (never trained), the
// errors for bad tools, and Python's json.dumps layout.
#include <gtest/gtest.h>

#include "io/tokenizer/chat_template.h"
#include "io/tokenizer/python_json.h"
#include "tests/support/chat_spans.h"
#include "tests/tokenizer_fixtures.h"

namespace glm4 {
namespace {

using testing::shared_tokenizer;
using testing::spans;

const std::string kTool =
    R"({"type": "function", "function": {"name": "get_weather", "parameters": {}}})";

std::vector<ChatMessage> round_trip() {
  ChatMessage call{"assistant", "", "I should look."};
  call.tool_calls.push_back({"c1", "get_weather", R"({"city": "Paris"})"});
  ChatMessage result{"tool", "sunny"};
  result.tool_call_id = "c1";
  return {{"user", "Weather?"}, call, result, {"assistant", "Sunny.", "Easy."}};
}

TEST(ChatTools, TargetsCoverCallsAndNeverToolResults) {
  const Tokenizer& tok = shared_tokenizer("glm4-json");
  ChatOptions options;
  options.tools = {kTool};
  const RenderedChat g45 = render_chat(tok, ChatFormat::Glm45, round_trip(), false, options);
  ASSERT_EQ(g45.tool_result.size(), g45.ids.size());
  EXPECT_EQ(spans(tok, g45, g45.target),
            "[\n<think>I should look.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
            "<arg_value>Paris</arg_value>\n</tool_call><|observation|>]"
            "[\n<think>Easy.</think>\nSunny.<|endoftext|>]");
  EXPECT_EQ(spans(tok, g45, g45.tool_result), "[\n<tool_response>\nsunny\n</tool_response>]");
  const RenderedChat g4 = render_chat(tok, ChatFormat::Glm4, round_trip(), false, options);
  EXPECT_EQ(spans(tok, g4, g4.target),
            "[get_weather\n{\"city\": \"Paris\"}<|observation|>][\nSunny.<|endoftext|>]");
  EXPECT_EQ(spans(tok, g4, g4.tool_result), "[\nsunny]");
  // A record that ends with calls ends with <|observation|>: the model stops for the results.
  std::vector<ChatMessage> calls_last = round_trip();
  calls_last.resize(2);
  for (ChatFormat f : {ChatFormat::Glm4, ChatFormat::Glm45, ChatFormat::Glm47}) {
    const RenderedChat chat = render_chat(tok, f, calls_last, false, options);
    EXPECT_EQ(chat.ids.back(), *tok.special_id("<|observation|>")) << chat_format_name(f);
    EXPECT_EQ(chat.target.back(), 1) << chat_format_name(f);
  }
}

TEST(ChatTools, ErrorsNameTheToolAndFormat) {
  const Tokenizer& tok = shared_tokenizer("glm4-json");
  auto error_of = [&](ChatFormat f, const std::vector<std::string>& tools) {
    ChatOptions options;
    options.tools = tools;
    try {
      render_chat(tok, f, {{"user", "q"}}, true, options);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of(ChatFormat::Glm4, {kTool, R"({"type": "retrieval"})"}).find("tools[1]"),
            std::string::npos);
  EXPECT_NE(error_of(ChatFormat::Glm45, {"{not json"}).find("tools[0] is not JSON"),
            std::string::npos);
  EXPECT_NE(error_of(ChatFormat::ChatGlm3, {kTool}).find("chatglm3"), std::string::npos);
}

TEST(ChatTools, PythonJsonDumps) {
  const auto v = ordered_json::parse(R"({"b": [1, 2.5, "é\n"], "a": {}, "c": {"x": null}})");
  EXPECT_EQ(python_json_dumps(v), R"({"b": [1, 2.5, "é\n"], "a": {}, "c": {"x": null}})");
  EXPECT_EQ(python_json_dumps(v, 2),
            "{\n  \"b\": [\n    1,\n    2.5,\n    \"é\\n\"\n  ],\n  \"a\": {},\n  \"c\": {\n"
            "    \"x\": null\n  }\n}");
  EXPECT_TRUE(parse_ordered_json("{").is_discarded());
}

}  // namespace
}  // namespace glm4
