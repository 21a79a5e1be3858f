// Training records with tools: OpenAI-style (tools beside messages, assistant tool_calls with
// arguments as a string or an object, tool results) and zai's fine-tuning demo layout (tools on
// the system turn, a call as {"name", "arguments"} content, observation results); errors name
// the field. And the examples they make: tool results never carry loss.
#include <gtest/gtest.h>

#include "base/check.h"
#include "dataset/dataset.h"
#include "dataset/records.h"

namespace glm4 {
namespace {

std::string error_of(const std::string& line) {
  try {
    parse_record(line);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(DatasetTools, OpenAiRecords) {
  const Record r = parse_record(
      R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": 2}}}],)"
      R"( "messages": [{"role": "user", "content": "q"},)"
      R"( {"role": "assistant", "content": null, "reasoning_content": "think", "tool_calls": [)"
      R"(  {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}},)"
      R"(  {"id": "c2", "type": "function", "function": {"name": "f", "arguments": {"b": [1, "é"], "a": null}}}]},)"
      R"( {"role": "tool", "tool_call_id": "c1", "content": "r1"},)"
      R"( {"role": "assistant", "content": "done"}]})");
  ASSERT_EQ(r.tools.size(), 1u);
  // Key order as written (z before a): the templates render tools as given.
  EXPECT_EQ(r.tools[0],
            R"({"type":"function","function":{"name":"f","parameters":{"z":1,"a":2}}})");
  ASSERT_EQ(r.messages.size(), 4u);
  const ChatMessage& call = r.messages[1];
  EXPECT_EQ(call.content, "");
  EXPECT_EQ(call.reasoning_content, "think");
  ASSERT_EQ(call.tool_calls.size(), 2u);
  EXPECT_EQ(call.tool_calls[0].id, "c1");
  EXPECT_EQ(call.tool_calls[0].arguments, R"({"x": 1})");  // a string: kept as written
  // An object: written as Python's json.dumps does, its keys in order.
  EXPECT_EQ(call.tool_calls[1].arguments, R"({"b": [1, "é"], "a": null})");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_call_id, "c1");
}

TEST(DatasetTools, ZaiFineTuningDemoLayout) {
  const Record r = parse_record(
      R"({"messages": [{"role": "system", "content": "", "tools": [{"type": "function",)"
      R"( "function": {"name": "get_recommended_books", "parameters": {}}}]},)"
      R"( {"role": "user", "content": "Books?"},)"
      R"( {"role": "assistant", "content": "{\"name\": \"get_recommended_books\", \"arguments\": {\"interests\": [\"history\"]}}"},)"
      R"( {"role": "observation", "content": "{\"books\": [\"Sapiens\"]}"},)"
      R"( {"role": "assistant", "content": "Read Sapiens."}]})");
  ASSERT_EQ(r.tools.size(), 1u);
  ASSERT_EQ(r.messages[2].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.messages[2].tool_calls[0].name, "get_recommended_books");
  EXPECT_EQ(r.messages[2].tool_calls[0].arguments, R"({"interests": ["history"]})");
  EXPECT_EQ(r.messages[3].role, "observation");
  EXPECT_TRUE(r.messages[4].tool_calls.empty());
  // Without tools the same JSON content is an answer, not a call.
  const Record plain = parse_record(
      R"({"messages": [{"role": "user", "content": "q"},)"
      R"( {"role": "assistant", "content": "{\"name\": \"f\", \"arguments\": {}}"}]})");
  EXPECT_TRUE(plain.messages[1].tool_calls.empty());
}

TEST(DatasetTools, ErrorsNameTheField) {
  const std::string user = R"({"role": "user", "content": "q"})";
  EXPECT_NE(error_of(R"({"tools": {}, "messages": [)" + user + "]}")
                .find("\"tools\" must be an array of tool specs, got object"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"tools": [{"type": "code"}], "messages": [)" + user + "]}")
                .find("\"tools\"[0] must be {\"type\": \"function\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"messages": [)" + user +
                     R"(, {"role": "assistant", "tool_calls": [{"function": {"name": "f",)"
                     R"( "arguments": "[1]"}}]}]})")
                .find("\"messages\"[1].tool_calls[0].function.arguments is not a JSON object: [1]"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"messages": [)" + user +
                     R"(, {"role": "assistant", "tool_calls": [{"type": "function"}]}]})")
                .find("\"messages\"[1].tool_calls[0] has no \"function\" object"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"messages": [{"role": "user", "content": "q", "tool_calls": []}]})")
                .find("\"messages\"[0].tool_calls: only an assistant turn makes calls"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"messages": [{"role": "user", "content": "q", "tools": []}]})")
                .find("\"messages\"[0].tools: only a system turn carries tools"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"messages": [{"role": "assistant"}]})")
                .find("\"messages\"[0] has no \"content\""),
            std::string::npos);
}

// The tool result's tokens never carry loss, with or without mask_prompt; the call's do.
TEST(DatasetTools, ToolResultsNeverCarryLoss) {
  TextEncoder enc;
  enc.prefix_ids = {1, 2};
  enc.eos_id = 3;
  enc.render_chat = [](const std::vector<ChatMessage>& m, const ChatOptions&) {
    RenderedChat r{{1, 2, 10, 11, 12, 13, 14}, {0, 0, 0, 1, 1, 0, 1}, {0, 0, 0, 0, 0, 1, 0}};
    EXPECT_EQ(m.size(), 3u);
    return r;
  };
  Record r;
  r.kind = Record::Kind::kChat;
  r.messages = {{"user", "q"}, {"assistant", "call"}, {"tool", "result"}};
  for (bool mask : {false, true}) {
    DatasetOptions o;
    o.mask_prompt = mask;
    const Example ex = make_example(r, enc, o);
    EXPECT_EQ(ex.labels[5], kIgnoreLabel) << mask;
    EXPECT_EQ(ex.labels[4], 12) << mask;
    EXPECT_EQ(ex.labels[6], 14) << mask;
    EXPECT_EQ(ex.labels[2], mask ? kIgnoreLabel : 10) << mask;
  }
}

}  // namespace
}  // namespace glm4
