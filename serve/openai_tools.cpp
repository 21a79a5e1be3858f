// The OpenAI tool fields checked, and chat replies read into content, reasoning and tool calls.
#include "serve/openai_tools.h"

#include <mutex>
#include <random>

#include "base/check.h"
#include "infer/grammar/tool_call.h"
#include "io/tokenizer/python_json.h"
#include "serve/openai_schema.h"

namespace glm4::serve {
namespace {

constexpr size_t kMaxTools = 128;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, "'" + param + "': " + message, param, "invalid_value");
}

// OpenAI's rule for function names: letters, digits, '_' and '-', at most 64.
bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  return true;
}

std::string call_id() {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lock(mu);
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)rng());
  return std::string("call_") + buf;
}

}  // namespace

ToolRequest parse_tool_fields(const json& body, std::string_view text) {
  ToolRequest out;
  const auto tools = body.find("tools");
  if (tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) bad("tools", "expected an array of tool specs");
    if (tools->size() > kMaxTools)
      bad("tools", str_cat("has ", tools->size(), " tools; the limit is ", kMaxTools));
    // The same array with its keys in the body's order: the chat templates write tools as given.
    const ordered_json ordered = ordered_json::parse(text, nullptr, false)["tools"];
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string p = str_cat("tools[", i, "]");
      if (!t.is_object()) bad(p, "expected an object");
      if (t.value("type", "") != "function") bad(p + ".type", "expected \"function\"");
      const auto f = t.find("function");
      if (f == t.end() || !f->is_object()) bad(p + ".function", "expected an object");
      const auto name = f->find("name");
      if (name == f->end() || !name->is_string() || !valid_name(name->get<std::string>()))
        bad(p + ".function.name",
            "expected a name of letters, digits, '_' and '-' (at most 64 characters)");
      const auto params = f->find("parameters");
      if (params != f->end() && !params->is_null() && !params->is_object())
        bad(p + ".function.parameters", "expected a JSON schema object");
      const auto description = f->find("description");
      if (description != f->end() && !description->is_null() && !description->is_string())
        bad(p + ".function.description", "expected a string");
      out.tools.push_back(ordered[i].dump());
    }
  }
  const auto choice = body.find("tool_choice");
  if (choice == body.end() || choice->is_null()) return out;
  if (choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "none")
      out.choice = ToolChoice::None;
    else if (c == "auto")
      out.choice = ToolChoice::Auto;
    else if (c == "required")
      out.choice = ToolChoice::Required;
    else
      bad("tool_choice",
          "expected \"none\", \"auto\", \"required\" or a function, got \"" + c + "\"");
  } else if (choice->is_object()) {
    const auto f = choice->find("function");
    if (choice->value("type", "") != "function" || f == choice->end() || !f->is_object() ||
        !f->contains("name") || !(*f)["name"].is_string())
      bad("tool_choice", "expected {\"type\": \"function\", \"function\": {\"name\": ...}}");
    out.choice = ToolChoice::Named;
    out.name = (*f)["name"].get<std::string>();
    bool known = false;
    for (const json& t : body.value("tools", json::array()))
      known = known || t["function"]["name"] == out.name;
    if (!known) bad("tool_choice.function.name", "no tool named \"" + out.name + "\" in tools");
  } else {
    bad("tool_choice", "expected a string or an object");
  }
  if ((out.choice == ToolChoice::Required || out.choice == ToolChoice::Named) && out.tools.empty())
    bad("tool_choice", "needs tools to choose from");
  return out;
}

std::vector<ToolCall> parse_tool_calls(const json& calls, const std::string& param) {
  const std::string p = param + ".tool_calls";
  if (!calls.is_array()) bad(p, "expected an array");
  std::vector<ToolCall> out;
  for (size_t i = 0; i < calls.size(); ++i) {
    const json& c = calls[i];
    const std::string at = str_cat(p, "[", i, "]");
    if (!c.is_object()) bad(at, "expected an object");
    const auto f = c.find("function");
    if (f == c.end() || !f->is_object()) bad(at + ".function", "expected an object");
    const auto name = f->find("name");
    if (name == f->end() || !name->is_string() || name->get<std::string>().empty())
      bad(at + ".function.name", "expected a non-empty string");
    ToolCall call;
    call.name = name->get<std::string>();
    if (const auto id = c.find("id"); id != c.end() && id->is_string()) call.id = *id;
    const auto args = f->find("arguments");
    if (args != f->end() && !args->is_null()) {
      if (!args->is_string()) bad(at + ".function.arguments", "expected a string of JSON");
      // Kept as sent, as OpenAI keeps them: GLM-4 writes them back as text; the GLM-4.5
      // family's templates need a JSON object, and rendering says so (a 400 naming the message).
      call.arguments = args->get<std::string>();
    }
    out.push_back(std::move(call));
  }
  return out;
}

ReplyReading reply_reading(ChatFormat format, const ChatOptions& chat, const ToolRequest& tools) {
  ReplyReading r;
  const bool glm45 = format == ChatFormat::Glm45 || format == ChatFormat::Glm47;
  const bool calls = !tools.tools.empty() && tools.choice != ToolChoice::None &&
                     (glm45 || calls_by_name_line(format));
  r.parse = glm45 || calls;
  r.options.format = format;
  r.options.enable_thinking = chat.enable_thinking;
  r.options.parse_calls = calls;
  r.options.tools = tools.tools;
  r.options.forced_call =
      calls && (tools.choice == ToolChoice::Named || tools.choice == ToolChoice::Required);
  if (calls && tools.choice == ToolChoice::Named) r.forced_name = tools.name;
  // Glm4 opens a call only with its name: "required" with one tool is that tool.
  if (calls && tools.choice == ToolChoice::Required && calls_by_name_line(format) &&
      tools.tools.size() == 1)
    r.forced_name = json::parse(tools.tools[0])["function"]["name"].get<std::string>();
  if (r.options.forced_call)
    r.prefill = tool_call_prefill(format, chat.enable_thinking, r.forced_name);
  // Glm4 "required" among several tools: nothing to open; the grammar starts the reply with one
  // of the names, which the parser reads as a call.
  if (r.prefill.empty()) r.options.forced_call = false;
  if (calls && (tools.choice == ToolChoice::Named || tools.choice == ToolChoice::Required))
    r.grammar = grammar::tool_call_grammar(format, tools.tools, r.forced_name);
  if (calls && tools.choice == ToolChoice::Auto)
    r.call_grammar = grammar::tool_call_grammar(format, tools.tools, "");
  return r;
}

ChatReply::ChatReply(const ReplyReading& reading) : reading_(reading), parser_(reading.options) {}

json ChatReply::delta_of(const ReplyDelta& d) {
  if (d.empty()) return nullptr;
  json delta = json::object();
  if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
  if (!d.content.empty()) delta["content"] = d.content;
  json calls = json::array();
  for (const ToolCallDelta& c : d.calls) {
    if (!calls.empty() && calls.back()["index"] == c.index && c.name.empty()) {
      calls.back()["function"]["arguments"] =
          calls.back()["function"]["arguments"].get<std::string>() + c.arguments;
      continue;
    }
    json entry = {{"index", c.index}};
    if (!c.name.empty()) {  // the call's first delta: its id, type and name (OpenAI's order)
      while (ids_.size() <= size_t(c.index)) ids_.push_back(call_id());
      entry["id"] = ids_[size_t(c.index)];
      entry["type"] = "function";
      entry["function"] = {{"name", c.name}, {"arguments", c.arguments}};
    } else {
      entry["function"] = {{"arguments", c.arguments}};
    }
    calls.push_back(entry);
  }
  if (!calls.empty()) delta["tool_calls"] = calls;
  return delta;
}

json ChatReply::start() {
  if (!reading_.forced_name.empty()) return delta_of(parser_.begin_call(reading_.forced_name));
  return delta_of(parser_.push(reading_.prefill));
}

json ChatReply::push(const std::string& text, bool new_turn) {
  ReplyDelta d = parser_.push(text);
  if (new_turn) {
    ReplyDelta t = parser_.turn();
    d.content += t.content;
    d.reasoning += t.reasoning;
    d.calls.insert(d.calls.end(), t.calls.begin(), t.calls.end());
  }
  return delta_of(d);
}

json ChatReply::finish() { return delta_of(parser_.finish()); }

std::string ChatReply::finish_reason(const std::string& model_reason) const {
  const ParsedReply& r = parser_.reply();
  return model_reason == "stop" && !r.calls.empty() && !r.truncated_call ? "tool_calls"
                                                                         : model_reason;
}

json ChatReply::message() const {
  const ParsedReply& r = parser_.reply();
  json m = {{"role", "assistant"}, {"content", r.content}, {"refusal", nullptr}};
  if (!r.reasoning.empty()) m["reasoning_content"] = r.reasoning;
  if (!r.calls.empty()) {
    if (r.content.empty()) m["content"] = nullptr;  // as OpenAI answers a pure call
    json calls = json::array();
    for (size_t i = 0; i < r.calls.size(); ++i)
      calls.push_back(
          {{"id", i < ids_.size() ? ids_[i] : std::string()},
           {"type", "function"},
           {"function", {{"name", r.calls[i].name}, {"arguments", r.calls[i].arguments}}}});
    m["tool_calls"] = calls;
  }
  return m;
}

}  // namespace glm4::serve
