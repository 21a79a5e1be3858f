// Tools and reasoning in the OpenAI chat API: the request's "tools", "tool_choice" and assistant
// "tool_calls" checked field by field (400s name the field); how a chat reply is read (the
// model's <think> and call syntax parsed, io/tokenizer/reply_parser.h) and shown, whole
// (message.tool_calls, reasoning_content) or streamed (delta.tool_calls, delta.reasoning_content).
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "infer/grammar/grammar.h"
#include "io/tokenizer/chat_template.h"
#include "io/tokenizer/reply_parser.h"

namespace glm4::serve {

using json = nlohmann::json;

enum class ToolChoice { Auto, None, Required, Named };

// The request's tool fields: "tools" (kept as JSON text in the body's key order, from `text`)
// into chat_options.tools, and "tool_choice". Throws ApiError (400) naming the field.
struct ToolRequest {
  std::vector<std::string> tools;
  ToolChoice choice = ToolChoice::Auto;
  std::string name;  // ToolChoice::Named
};
ToolRequest parse_tool_fields(const json& body, std::string_view text);

// An assistant message's "tool_calls" ([{"id", "type": "function", "function": {"name",
// "arguments": JSON object text}}]). `param` is the message's ("messages[3]").
std::vector<ToolCall> parse_tool_calls(const json& calls, const std::string& param);

// How a chat request's reply is read. `parse` is false for formats or requests where the reply
// is plain text (GLM-4 / ChatGLM without tools): then nothing here applies.
struct ReplyReading {
  bool parse = false;
  ReplyParserOptions options;
  std::string prefill;      // appended to the prompt (tool_choice required / named)
  std::string forced_name;  // tool_choice naming a function: the call the prefill opened
  // tool_choice required / named: the rest of the call after the prefill (its name when open,
  // arguments of the tool's parameters schema, its end; infer/grammar/tool_call.h).
  std::shared_ptr<const grammar::Grammar> grammar;
  // tool_choice auto: the grammar of a call the model opens (its name free).
  std::shared_ptr<const grammar::Grammar> call_grammar;
};
ReplyReading reply_reading(ChatFormat format, const ChatOptions& chat, const ToolRequest& tools);

// One choice's reply as it comes: the parser plus the call ids the answer gives.
class ChatReply {
 public:
  explicit ChatReply(const ReplyReading& reading);
  // delta objects for a stream ({"content"}, {"reasoning_content"}, {"tool_calls": [...]});
  // null when a piece adds nothing to show yet.
  json start();  // the prefill's part (a forced call's name)
  // `new_turn`: the text ends a turn and the model began another (SlotEvent::new_turn).
  json push(const std::string& text, bool new_turn = false);
  json finish();
  // "tool_calls" when the reply made complete calls and ended by itself (a stop token); the
  // model's reason otherwise ("length" keeps saying the reply was cut, calls or not).
  std::string finish_reason(const std::string& model_reason) const;
  json message() const;  // the whole message (after finish)

 private:
  json delta_of(const ReplyDelta& d);
  ReplyReading reading_;
  ReplyParser parser_;
  std::vector<std::string> ids_;  // call_... per call index
};

}  // namespace glm4::serve
