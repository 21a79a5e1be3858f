// The terminal view of a parsed chat reply, and the --tools file.
#include "cli/reply_display.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "base/check.h"
#include "io/tokenizer/python_json.h"

namespace glm4::cli {

ReplyDisplay::ReplyDisplay(const ReplyParserOptions& options, std::FILE* out)
    : parser_(options), out_(out) {}

void ReplyDisplay::show(const ReplyDelta& d) {
  if (!out_) return;
  if (!d.reasoning.empty()) {
    if (!in_reasoning_) std::fputs("[thinking] ", out_);
    in_reasoning_ = true;
    std::fputs(d.reasoning.c_str(), out_);
  }
  if (!d.content.empty()) {
    if (in_reasoning_) std::fputs("\n", out_);
    in_reasoning_ = false;
    any_content_ = true;
    std::fputs(d.content.c_str(), out_);
  }
  std::fflush(out_);
}

void ReplyDisplay::push(const std::string& text) { show(parser_.push(text)); }

void ReplyDisplay::finish() {
  show(parser_.finish());
  if (!out_) return;
  for (const ToolCall& call : parser_.reply().calls) {
    if (in_reasoning_ || any_content_) std::fputs("\n", out_);
    in_reasoning_ = false;
    any_content_ = true;
    std::fprintf(out_, "[tool call] %s %s", call.name.c_str(), call.arguments.c_str());
  }
  std::fflush(out_);
}

ChatMessage ReplyDisplay::message() const {
  const ParsedReply& r = parser_.reply();
  ChatMessage m{"assistant", r.content};
  if (!r.reasoning.empty()) m.reasoning_content = r.reasoning;
  for (size_t i = 0; i < r.calls.size(); ++i) {
    m.tool_calls.push_back(r.calls[i]);
    m.tool_calls.back().id = "call_" + std::to_string(i + 1);
  }
  return m;
}

std::vector<std::string> read_tools_file(const std::string& path) {
  std::error_code ec;
  GLM4_CHECK(!std::filesystem::is_directory(path, ec), "--tools ", path,
             ": is a directory, expected a file");
  std::ifstream in(path, std::ios::binary);
  GLM4_CHECK(in.good(), "--tools: cannot open '", path, "'");
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  const ordered_json tools = parse_ordered_json(text);
  GLM4_CHECK(!tools.is_discarded(), "--tools ", path, ": not valid JSON");
  GLM4_CHECK(tools.is_array(), "--tools ", path, ": expected a JSON array of tool specs, got ",
             tools.type_name());
  std::vector<std::string> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ordered_json& t = tools[i];
    const bool ok = t.is_object() && t.value("type", "") == "function" && t.contains("function") &&
                    t["function"].is_object() && t["function"].contains("name") &&
                    t["function"]["name"].is_string();
    GLM4_CHECK(ok, "--tools ", path, ": [", i,
               "] is not {\"type\": \"function\", \"function\": {\"name\": ...}}");
    out.push_back(t.dump());
  }
  return out;
}

}  // namespace glm4::cli
