// Splits a generated reply into answer text, reasoning and tool calls as GLM models write them,
// piece by piece while it is decoded (for streaming) and whole.
//
// GLM-4.5 family (Glm45, Glm47): <think>reasoning</think>, then the answer, then calls
// <tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value>...</tool_call> (Glm45 with "\n"
// between the parts). Glm47's prompt ends inside <think> when thinking is on, so its reply starts
// as reasoning. GLM-4 (Glm4, Glm40414): a reply starting with "\n" is an answer; otherwise, when
// its first line is a name (one of the tools, or any identifier when no tools are given; "name"
// or GLM-4-0414's "name "), it is a call, that line + the arguments as JSON. When the arguments'
// object closes and the model goes on (a further <|assistant|> turn, which the decoded text
// leaves out), what follows is read the same way: another call, or answer text. Text that may be
// the start of a tag is held back until it is known not to be one.
//
// Arguments become one JSON object text: Glm45 / Glm47 values are strings when the tool's
// schema says "string" (or when the value is not JSON text), else the JSON they spell; Glm4's
// are passed through as the model writes them.
//
// Malformed calls: a call without a name ("<tool_call></tool_call>") is left in the answer as
// text; text inside a call that is neither an argument nor the end closes the call with the
// arguments read so far, and that text and everything after it is answer text (no more calls
// are parsed). A Glm4 / Glm40414 call whose arguments are not a JSON object is answer text.
// Truncated calls: a reply that ends inside a call (max_tokens, a stop) gives that call's raw text
// as answer text in reply() and sets truncated_call; deltas already pushed for it stay sent (a
// stream's finish_reason "length" says it is incomplete, as OpenAI's does). The raw text is kept
// rather than an error so that nothing the model wrote is lost.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "io/file/json_depth.h"
#include "io/tokenizer/chat_template.h"

namespace glm4 {

struct ToolCallDelta {
  int index = 0;          // the call's place in the reply (0, 1, ...)
  std::string name;       // set in the call's first delta only
  std::string arguments;  // the next piece of the arguments' JSON text
};

struct ReplyDelta {
  std::string content, reasoning;
  std::vector<ToolCallDelta> calls;
  bool empty() const { return content.empty() && reasoning.empty() && calls.empty(); }
};

struct ParsedReply {
  std::string content, reasoning;
  std::vector<ToolCall> calls;  // complete calls (ids left empty: the server names them)
  bool truncated_call = false;  // the reply ended inside a call (its text is in content)
  bool malformed_call = false;  // a call broke off (see above)
};

struct ReplyParserOptions {
  ChatFormat format = ChatFormat::Glm45;
  bool enable_thinking = true;  // Glm47's reply then starts inside <think>
  bool parse_calls = true;      // false: call syntax stays answer text (tool_choice none)
  // The prompt forced a call (tool_choice "required" or a named function): a call the reply
  // leaves unfinished is still the reply's call, with the arguments it has (Glm45 / Glm47: the
  // complete ones; Glm4: the text as written, even when it is not valid JSON, as OpenAI warns
  // its arguments may not be).
  bool forced_call = false;
  std::vector<std::string> tools;  // OpenAI tool specs as JSON text: names and string params
};

class ReplyParser {
 public:
  explicit ReplyParser(ReplyParserOptions options);
  ReplyDelta push(std::string_view piece);  // what this piece adds (held-back text excluded)
  // The prompt already opened a call to `name` (tool_call_prefill's text): the reply continues
  // with its arguments. Call before any push.
  ReplyDelta begin_call(const std::string& name);
  // The model began another <|assistant|> turn (its token, which the decoded text leaves out):
  // GLM-4 formats read what follows as a turn's start again, an answer after "\n" or else
  // perhaps a call, so a reply may give text and then calls. An unfinished name line before it
  // is answer text; inside a call's arguments, and for other formats, nothing changes.
  ReplyDelta turn();
  ReplyDelta finish();  // the end of the reply: everything still held
  const ParsedReply& reply() const { return reply_; }

 private:
  enum class State {
    Start,
    Content,
    Reasoning,
    CallName,
    CallBody,
    ArgKey,
    ArgGap,
    ArgValue,
    Glm4Name,
    Glm4Args,
    Glm4Next,
    Verbatim
  };
  // Where a GLM-4 call's arguments object closes: brackets counted outside strings.
  struct ObjectEnd {
    bool started = false, object = false;
    JsonBrackets brackets;
    size_t find(std::string_view text);  // the position after the closing '}', or npos
  };
  void run(ReplyDelta& out, bool at_end);
  void emit_content(ReplyDelta& out, std::string_view text);
  void emit_reasoning(ReplyDelta& out, std::string_view text);
  void open_call(ReplyDelta& out, std::string name);
  void close_call(ReplyDelta& out);
  std::string value_json(const std::string& key, const std::string& value) const;

  ReplyParserOptions options_;
  std::map<std::string, std::map<std::string, bool>> string_params_;  // tool -> param -> string
  State state_;
  std::string buf_;         // text not yet consumed
  std::string field_;       // the name, key or value being read
  std::string key_;         // the argument whose value is being read
  std::string call_raw_;    // the current call's text as written
  std::string held_space_;  // trailing whitespace of content / reasoning, not yet emitted
  bool content_started_ = false, reasoning_started_ = false;
  int args_in_call_ = 0;
  ObjectEnd args_end_;
  ParsedReply reply_;
};

// The text a prompt is extended with so that the model continues inside a call: for `name`
// (tool_choice naming a function) the call's opening with the name; for an empty name
// (tool_choice "required") the opening tag, where the model writes the name. Glm45 / Glm47 skip
// the thinking block first. Glm4 / Glm40414 can only open a named call ("name\n", "name \n");
// for "required" they give "" (nothing to force without a name). Feed the same text to the
// ReplyParser first.
std::string tool_call_prefill(ChatFormat format, bool enable_thinking, const std::string& name);

}  // namespace glm4
