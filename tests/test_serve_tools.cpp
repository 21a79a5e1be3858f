// The server's tool layer without a server: tools / tool_choice / tool_calls checked with 400s
// naming the field; the prompt of a forced call ends with the call's opening; a reply read into
// the message and the stream deltas OpenAI clients expect, with finish_reason tool_calls.
#include <gtest/gtest.h>

#include "infer/grammar/automaton.h"
#include "serve/openai_schema.h"
#include "tests/support/repo_paths.h"

namespace glm4::serve {
namespace {

const std::string kWeather =
    R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",)"
    R"( "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}})";
const std::string kUser = R"("messages": [{"role": "user", "content": "q"}])";

std::string param_of(const std::string& body) {
  try {
    parse_request(body, Endpoint::Chat);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400) << e.what();
    return e.param;
  }
  return "no error";
}

TEST(ServeToolSchema, BadFieldsAreNamed) {
  EXPECT_EQ(param_of("{" + kUser + R"(, "tools": {}})"), "tools");
  EXPECT_EQ(param_of("{" + kUser + R"(, "tools": [{"type": "x"}]})"), "tools[0].type");
  EXPECT_EQ(param_of("{" + kUser + R"(, "tools": [{"type": "function"}]})"), "tools[0].function");
  EXPECT_EQ(
      param_of("{" + kUser + R"(, "tools": [{"type": "function", "function": {"name": ""}}]})"),
      "tools[0].function.name");
  EXPECT_EQ(param_of("{" + kUser + R"(, "tools": [{"type": "function", "function": )" +
                     R"({"name": "f", "parameters": 3}}]})"),
            "tools[0].function.parameters");
  EXPECT_EQ(param_of("{" + kUser + R"(, "tools": [)" + kWeather + R"(], "tool_choice": "any"})"),
            "tool_choice");
  EXPECT_EQ(param_of("{" + kUser + R"(, "tools": [)" + kWeather +
                     R"(], "tool_choice": {"type": "function", "function": {"name": "g"}}})"),
            "tool_choice.function.name");
  EXPECT_EQ(param_of("{" + kUser + R"(, "tool_choice": "required"})"), "tool_choice");
  EXPECT_EQ(param_of(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]})"),
            "messages[0].tool_calls[0].function.name");
  EXPECT_EQ(param_of(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": )"
                     R"({"name": "f", "arguments": {}}}]}]})"),
            "messages[0].tool_calls[0].function.arguments");
  // Valid: tools kept in the body's key order, the choice and the calls read.
  const ParsedRequest r = parse_request(
      "{" + kUser + R"(, "tools": [)" + kWeather +
          R"(], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})",
      Endpoint::Chat);
  ASSERT_EQ(r.chat_options.tools.size(), 1u);
  EXPECT_EQ(r.chat_options.tools[0].find("\"type\":\"function\""), 1u);  // first, as sent
  EXPECT_EQ(r.tools.choice, ToolChoice::Named);
  EXPECT_EQ(r.tools.name, "get_weather");
}

TEST(ServeToolSchema, ForcedCallPrefillAndReading) {
  ToolRequest t;
  t.tools = {kWeather};
  t.choice = ToolChoice::Named;
  t.name = "get_weather";
  const ReplyReading g45 = reply_reading(ChatFormat::Glm45, ChatOptions{}, t);
  EXPECT_TRUE(g45.parse && g45.options.forced_call);
  EXPECT_EQ(g45.prefill, "\n<think></think>\n<tool_call>get_weather\n");
  const ReplyReading g4 = reply_reading(ChatFormat::Glm4, ChatOptions{}, t);
  EXPECT_EQ(g4.prefill, "get_weather\n");
  // The rest of a forced call is constrained: the arguments of the tool's schema, then the end.
  ASSERT_TRUE(g4.grammar && g45.grammar);
  EXPECT_TRUE(grammar::Automaton(g4.grammar).matches(R"({"city": "x", "days": 2})"));
  EXPECT_FALSE(grammar::Automaton(g4.grammar).matches(R"({"city": 2})"));
  EXPECT_TRUE(grammar::Automaton(g45.grammar)
                  .matches("<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>"));
  // GLM-4 "required" among two tools: nothing opened, the name is one of the tools'.
  t.choice = ToolChoice::Required;
  t.tools.push_back(R"({"type": "function", "function": {"name": "now"}})");
  const ReplyReading any = reply_reading(ChatFormat::Glm4, ChatOptions{}, t);
  EXPECT_EQ(any.prefill, "");
  ASSERT_TRUE(any.grammar);
  EXPECT_TRUE(grammar::Automaton(any.grammar).matches("now\n{}"));
  EXPECT_FALSE(grammar::Automaton(any.grammar).matches("The weather is fine."));
  // "auto": nothing forced; a call the model opens is held to the grammar with a free name.
  t.choice = ToolChoice::Auto;
  const ReplyReading automatic = reply_reading(ChatFormat::Glm4, ChatOptions{}, t);
  EXPECT_FALSE(automatic.grammar);
  ASSERT_TRUE(automatic.call_grammar);
  EXPECT_TRUE(grammar::Automaton(automatic.call_grammar).matches("now\n{}"));
  EXPECT_FALSE(grammar::Automaton(automatic.call_grammar).matches("get_weather\n{\"city\": 2}"));
  EXPECT_TRUE(reply_reading(ChatFormat::Glm45, ChatOptions{}, t).call_grammar);
  // "none": tools in the prompt, calls not read; GLM-4 without tools: plain text.
  t.choice = ToolChoice::None;
  EXPECT_FALSE(reply_reading(ChatFormat::Glm4, ChatOptions{}, t).parse);
  EXPECT_FALSE(reply_reading(ChatFormat::Glm45, ChatOptions{}, t).call_grammar);
  EXPECT_TRUE(reply_reading(ChatFormat::Glm47, ChatOptions{}, t).parse);  // reasoning still
  EXPECT_FALSE(reply_reading(ChatFormat::Glm47, ChatOptions{}, t).options.parse_calls);
}

TEST(ServeToolSchema, MessageAndStreamDeltas) {
  ToolRequest t;
  t.tools = {kWeather};
  const ReplyReading reading = reply_reading(ChatFormat::Glm45, ChatOptions{}, t);
  ChatReply stream(reading);
  EXPECT_TRUE(stream.start().is_null());  // nothing forced: nothing before the reply
  std::vector<json> deltas;
  for (const char* piece :
       {"\n<think>hm</think>\nOK.\n<tool_", "call>get_weather\n<arg_key>city</arg_key>\n",
        "<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n",
        "</tool_call>"})
    if (json d = stream.push(piece); !d.is_null()) deltas.push_back(d);
  if (json d = stream.finish(); !d.is_null()) deltas.push_back(d);
  std::string reasoning, content, arguments, id;
  for (const json& d : deltas) {
    reasoning += d.value("reasoning_content", "");
    content += d.value("content", "");
    for (const json& c : d.value("tool_calls", json::array())) {
      EXPECT_EQ(c["index"], 0);
      if (c.contains("id")) {  // the first delta of the call: id, type and name
        EXPECT_TRUE(id.empty());
        id = c["id"];
        EXPECT_EQ(c["type"], "function");
        EXPECT_EQ(c["function"]["name"], "get_weather");
      }
      arguments += c["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(reasoning, "hm");
  EXPECT_EQ(content, "OK.");
  EXPECT_EQ(arguments, R"({"city": "Paris", "days": 2})");
  EXPECT_EQ(id.rfind("call_", 0), 0u);
  EXPECT_EQ(stream.finish_reason("stop"), "tool_calls");
  EXPECT_EQ(stream.finish_reason("length"), "length");
  const json m = stream.message();
  EXPECT_EQ(m["content"], "OK.");
  EXPECT_EQ(m["reasoning_content"], "hm");
  ASSERT_EQ(m["tool_calls"].size(), 1u);
  EXPECT_EQ(m["tool_calls"][0]["id"], id);  // the same id whole and streamed
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], arguments);
}

}  // namespace
}  // namespace glm4::serve
