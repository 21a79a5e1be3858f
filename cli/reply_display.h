// A chat reply on the terminal with its parts told apart: reasoning as "[thinking] ...", the
// answer as it is, and each tool call as "[tool call] name {arguments}" once complete.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "io/tokenizer/reply_parser.h"

namespace glm4::cli {

class ReplyDisplay {
 public:
  // `out` null: nothing is printed (the parts are still collected).
  ReplyDisplay(const ReplyParserOptions& options, std::FILE* out);
  void push(const std::string& text);
  void turn() { show(parser_.turn()); }  // the model began another <|assistant|> turn
  void finish();
  const ParsedReply& reply() const { return parser_.reply(); }
  // The reply as the next turn's assistant message (calls named call_1, call_2, ...).
  ChatMessage message() const;

 private:
  void show(const ReplyDelta& d);
  ReplyParser parser_;
  std::FILE* out_;
  bool in_reasoning_ = false, any_content_ = false;
};

// --tools FILE: a JSON array of OpenAI tool specs, each kept as JSON text in its key order.
// Throws glm4::Error naming the flag, the file and the entry at fault.
std::vector<std::string> read_tools_file(const std::string& path);

}  // namespace glm4::cli
