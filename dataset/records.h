// Reading training data: where the files are, and JSON-lines records of four shapes
// (text, prompt/completion, chat messages, token ids), each checked with its file:line.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "io/tokenizer/chat_template.h"

namespace glm4 {

// A data path is a directory holding train.jsonl (required) and optionally valid.jsonl and
// test.jsonl, or a single file used for training. Absent files are empty strings.
struct DataFiles {
  std::string train, valid, test;
};
DataFiles resolve_data_path(const std::string& path);
// The file held-out scoring (evaluate, perplexity) reads: `path` itself when it is a file; for a
// data directory its test.jsonl (as mlx-lm's --test reads), else its valid.jsonl; else an error
// naming the directory.
std::string resolve_eval_path(const std::string& path);

// One line of a data file. Lines are objects of exactly one shape (other keys are ignored):
//   {"text": str}
//   {"prompt": str, "completion": str}
//   {"messages": [{"role": "system|user|assistant|tool|observation", "content": str}, ...],
//    "tools": [OpenAI tool spec, ...]?}
//     (an assistant turn may carry "reasoning_content": str, its thinking, which the GLM-4.5
//     family's formats train on, the others ignore it; and "tool_calls": [{"id"?, "function":
//     {"name": str, "arguments": JSON object or a string holding one}}], then "content" may be
//     null or absent; "tool" and "observation" turns are tool results. zai's fine-tuning demo
//     layout works too: "tools" on a system turn, and an assistant turn whose content is
//     {"name": str, "arguments": {...}} is a call when the record has tools.)
//   {"input_ids": [int, ...], "labels": [int, ...]?}   labels: -100 or a token id, one per id
// plus an optional "task": str that evaluation groups scores by.
struct Record {
  enum class Kind { kText, kPromptCompletion, kChat, kTokens };
  Kind kind = Kind::kText;
  std::string text;
  std::string prompt, completion;
  std::vector<ChatMessage> messages;
  std::vector<std::string> tools;  // chat: tool specs as JSON text (ChatOptions::tools)
  std::vector<int32_t> input_ids;
  std::vector<int32_t> labels;  // empty unless has_labels
  bool has_labels = false;
  std::string task;  // an optional string "task" key naming the record's kind, for per-task scores
};

// The longest line a data file may have (a record is read whole into memory before parsing);
// longer lines are refused with file:line and this limit's name. A long document is ~1 MB.
constexpr size_t kMaxRecordLineBytes = size_t(16) << 20;

// Parses one line; throws glm4::Error saying what is wrong (the caller adds file:line).
Record parse_record(std::string_view line);

// Calls fn(record, line_number) for every non-blank line (1-based numbers; CRLF and a UTF-8
// byte-order mark are tolerated). Any error from parsing or from fn is rethrown as glm4::Error
// prefixed with "path:line: ". Returns the number of records.
int64_t for_each_record(const std::string& path,
                        const std::function<void(const Record&, int64_t line)>& fn);

}  // namespace glm4
