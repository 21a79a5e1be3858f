// JSON-lines data files: locating them, parsing and checking each record.
#include "dataset/records.h"

#include <array>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "autograd/ops.h"
#include "base/check.h"
#include "io/file/json_depth.h"
#include "io/tokenizer/python_json.h"

namespace glm4 {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::array<const char*, 5> kRoles = {"system", "user", "assistant", "observation",
                                               "tool"};

template <class Json>
const std::string& string_field(const Json& j, const char* key, const std::string& where) {
  const Json& v = j.at(key);
  GLM4_CHECK(v.is_string(), where, " must be a string, got ", v.type_name());
  return v.template get_ref<const std::string&>();
}

// An integer array of token ids (>= 0) or labels (-100 or >= 0), each within int32.
std::vector<int32_t> int_array(const json& v, const char* key, bool labels) {
  GLM4_CHECK(v.is_array(), "\"", key, "\" must be an array of integers, got ", v.type_name());
  std::vector<int32_t> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const json& x = v[i];
    GLM4_CHECK(x.is_number_integer(), "\"", key, "\"[", i, "] must be an integer, got ",
               x.type_name(), x.is_number_float() ? " " + x.dump() : "");
    const bool too_big = x.is_number_unsigned()
                             ? x.get<uint64_t>() > uint64_t(std::numeric_limits<int32_t>::max())
                             : x.get<int64_t>() > std::numeric_limits<int32_t>::max();
    const int64_t value = too_big ? 0 : x.get<int64_t>();
    GLM4_CHECK(!too_big && (value >= 0 || (labels && value == kIgnoreLabel)), "\"", key, "\"[", i,
               "] = ", x.dump(), " is out of range (expected ",
               labels ? "-100 or a token id" : "a token id", " in [0, 2^31))");
    out.push_back(int32_t(value));
  }
  return out;
}

// Tool specs: an array of objects, each kept as JSON text in its key order.
std::vector<std::string> tools_field(const ordered_json& v, const std::string& where) {
  GLM4_CHECK(v.is_array(), where, " must be an array of tool specs, got ", v.type_name());
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const ordered_json& t = v[i];
    const std::string at = str_cat(where, "[", i, "]");
    GLM4_CHECK(t.is_object(), at, " must be an object, got ", t.type_name());
    const auto f = t.find("function");
    GLM4_CHECK(t.value("type", "") == "function" && f != t.end() && f->is_object() &&
                   f->contains("name") && (*f)["name"].is_string(),
               at, " must be {\"type\": \"function\", \"function\": {\"name\": str, ...}}");
    out.push_back(t.dump());
  }
  return out;
}

// A call's arguments as JSON object text: a string holding one, or an object (written as
// Python's json.dumps writes it, the form GLM's own tooling gives).
std::string arguments_text(const ordered_json& v, const std::string& where) {
  if (v.is_object()) return python_json_dumps(v);
  GLM4_CHECK(v.is_string(), where, " must be a JSON object or a string holding one, got ",
             v.type_name());
  const std::string& text = v.get_ref<const std::string&>();
  const ordered_json parsed = parse_ordered_json(text);
  GLM4_CHECK(text.empty() || (!parsed.is_discarded() && parsed.is_object()), where,
             " is not a JSON object: ", text.substr(0, 80));
  return text;
}

std::vector<ToolCall> tool_calls_field(const ordered_json& v, const std::string& where) {
  GLM4_CHECK(v.is_array(), where, " must be an array, got ", v.type_name());
  std::vector<ToolCall> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = str_cat(where, "[", i, "]");
    GLM4_CHECK(v[i].is_object(), at, " must be an object, got ", v[i].type_name());
    const auto f = v[i].find("function");
    GLM4_CHECK(f != v[i].end() && f->is_object(), at, " has no \"function\" object");
    GLM4_CHECK(f->contains("name"), at, ".function has no \"name\"");
    ToolCall call;
    call.name = string_field(*f, "name", at + ".function.name");
    GLM4_CHECK(!call.name.empty(), at, ".function.name is empty");
    if (f->contains("arguments") && !(*f)["arguments"].is_null())
      call.arguments = arguments_text((*f)["arguments"], at + ".function.arguments");
    if (v[i].contains("id") && v[i]["id"].is_string()) call.id = v[i]["id"];
    out.push_back(std::move(call));
  }
  return out;
}

// zai's fine-tuning demo writes a call as an assistant turn whose content is
// {"name": str, "arguments": {...}}: that, in a record with tools, is a call.
std::optional<ToolCall> demo_call(const std::string& content) {
  if (content.empty() || content.front() != '{') return std::nullopt;
  const ordered_json j = parse_ordered_json(content);
  if (j.is_discarded() || !j.is_object() || j.size() != 2 || !j.contains("name") ||
      !j["name"].is_string() || !j.contains("arguments") || !j["arguments"].is_object())
    return std::nullopt;
  return ToolCall{"", j["name"].get<std::string>(), python_json_dumps(j["arguments"])};
}

std::vector<ChatMessage> messages_field(const ordered_json& v, std::vector<std::string>* tools) {
  GLM4_CHECK(v.is_array(), "\"messages\" must be an array, got ", v.type_name());
  GLM4_CHECK(!v.empty(), "\"messages\" is empty");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const ordered_json& m = v[i];
    const std::string where = str_cat("\"messages\"[", i, "]");
    GLM4_CHECK(m.is_object(), where, " must be an object, got ", m.type_name());
    GLM4_CHECK(m.contains("role"), where, " has no \"role\"");
    const bool has_calls = m.contains("tool_calls") && !m["tool_calls"].is_null();
    const bool has_content = m.contains("content") && !m["content"].is_null();
    GLM4_CHECK(has_content || has_calls, where, " has no \"content\"");
    ChatMessage msg{string_field(m, "role", where + ".role"),
                    has_content ? string_field(m, "content", where + ".content") : ""};
    bool known = false;
    for (const char* r : kRoles) known = known || msg.role == r;
    GLM4_CHECK(known, where, " has unknown role \"", msg.role,
               "\" (expected system, user, assistant, tool or observation)");
    if (m.contains("reasoning_content") && !m["reasoning_content"].is_null()) {
      GLM4_CHECK(msg.role == "assistant", where,
                 ".reasoning_content: only an assistant turn has one (this one is \"", msg.role,
                 "\")");
      msg.reasoning_content = string_field(m, "reasoning_content", where + ".reasoning_content");
    }
    if (has_calls) {
      GLM4_CHECK(msg.role == "assistant", where,
                 ".tool_calls: only an assistant turn makes calls (this one is \"", msg.role,
                 "\")");
      msg.tool_calls = tool_calls_field(m["tool_calls"], where + ".tool_calls");
    }
    if (m.contains("tools") && !m["tools"].is_null()) {  // zai's demo: tools on the system turn
      GLM4_CHECK(msg.role == "system", where, ".tools: only a system turn carries tools");
      GLM4_CHECK(tools->empty(), where, ".tools: the record already has tools");
      *tools = tools_field(m["tools"], where + ".tools");
    }
    if (msg.role == "tool" && m.contains("tool_call_id") && m["tool_call_id"].is_string())
      msg.tool_call_id = m["tool_call_id"];
    out.push_back(std::move(msg));
  }
  if (!tools->empty())
    for (ChatMessage& m : out)
      if (m.role == "assistant" && m.tool_calls.empty())
        if (std::optional<ToolCall> call = demo_call(m.content)) {
          m.tool_calls.push_back(std::move(*call));
          m.content.clear();
        }
  return out;
}

// std::getline that stops storing after limit + 1 bytes (the caller refuses such a line), so a
// file without newlines cannot make the reader allocate its whole size. False at end of file.
bool read_line(std::istream& in, std::string* line, size_t limit) {
  line->clear();
  std::streambuf* buf = in.rdbuf();
  bool any = false;
  for (int c = buf->sbumpc(); c != std::char_traits<char>::eof(); c = buf->sbumpc()) {
    any = true;
    if (c == '\n') return true;
    if (line->size() <= limit) line->push_back(char(c));
    if (line->size() > limit) return true;
  }
  return any;
}

}  // namespace

DataFiles resolve_data_path(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  GLM4_CHECK(!ec && fs::exists(st), "data path '", path, "' does not exist");
  DataFiles files;
  if (!fs::is_directory(st)) {
    files.train = path;
    return files;
  }
  auto child = [&](const char* name) {
    const fs::path p = fs::path(path) / name;
    return fs::is_regular_file(p, ec) ? p.string() : std::string();
  };
  files.train = child("train.jsonl");
  files.valid = child("valid.jsonl");
  files.test = child("test.jsonl");
  GLM4_CHECK(!files.train.empty(), "data directory '", path, "' has no train.jsonl");
  return files;
}

std::string resolve_eval_path(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return path;
  for (const char* name : {"test.jsonl", "valid.jsonl"}) {
    const fs::path p = fs::path(path) / name;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  fail(path,
       ": is a directory without test.jsonl or valid.jsonl (a data folder holds "
       "train.jsonl, valid.jsonl and test.jsonl), expected one of those or a JSONL file");
}

Record parse_record(std::string_view line) {
  GLM4_CHECK(json_nesting_depth(line) <= kMaxJsonDepth, "JSON nests deeper than ", kMaxJsonDepth,
             " levels (limit kMaxJsonDepth)");
  json j;
  try {
    j = json::parse(line);
  } catch (const json::parse_error& e) {
    // nlohmann says "[json.exception...] parse error at line 1, column N: <what>"; the line is
    // always 1 here, so keep "column N: <what>".
    const std::string what = e.what();
    const size_t at = what.find("column ");
    fail("invalid JSON", at == std::string::npos ? ": " + what : " at " + what.substr(at));
  } catch (const json::exception& e) {  // out_of_range: a number beyond double's range
    fail("invalid JSON: ", e.what());
  }
  GLM4_CHECK(j.is_object(), "expected a JSON object, got ", j.type_name());
  const bool text = j.contains("text"), prompt = j.contains("prompt"),
             completion = j.contains("completion"), messages = j.contains("messages"),
             tokens = j.contains("input_ids");
  const int shapes = int(text) + int(prompt || completion) + int(messages) + int(tokens);
  if (shapes == 0) {
    std::string keys;
    for (auto it = j.begin(); it != j.end(); ++it)
      keys += (keys.empty() ? "\"" : ", \"") + it.key() + "\"";
    fail("unknown record shape (keys: ", keys.empty() ? "none" : keys,
         "); expected \"text\", \"prompt\" + \"completion\", \"messages\" or \"input_ids\"");
  }
  GLM4_CHECK(shapes == 1,
             "record mixes shapes: use exactly one of \"text\", \"prompt\" + \"completion\", "
             "\"messages\", \"input_ids\"");
  Record r;
  if (j.contains("task")) r.task = string_field(j, "task", "\"task\"");
  if (text) {
    r.kind = Record::Kind::kText;
    r.text = string_field(j, "text", "\"text\"");
  } else if (prompt || completion) {
    GLM4_CHECK(prompt && completion,
               prompt ? "\"prompt\" without \"completion\"" : "\"completion\" without \"prompt\"");
    r.kind = Record::Kind::kPromptCompletion;
    r.prompt = string_field(j, "prompt", "\"prompt\"");
    r.completion = string_field(j, "completion", "\"completion\"");
  } else if (messages) {
    r.kind = Record::Kind::kChat;
    // Again keeping key order: tool specs and call arguments are rendered as written.
    const ordered_json ordered = ordered_json::parse(line);
    if (ordered.contains("tools") && !ordered["tools"].is_null())
      r.tools = tools_field(ordered["tools"], "\"tools\"");
    std::vector<std::string> system_tools;
    r.messages = messages_field(ordered.at("messages"), &system_tools);
    GLM4_CHECK(r.tools.empty() || system_tools.empty(),
               "tools are given twice: beside \"messages\" and on a system turn");
    if (!system_tools.empty()) r.tools = std::move(system_tools);
  } else {
    r.kind = Record::Kind::kTokens;
    r.input_ids = int_array(j.at("input_ids"), "input_ids", false);
    GLM4_CHECK(!r.input_ids.empty(), "\"input_ids\" is empty");
    if (j.contains("labels") && !j.at("labels").is_null()) {
      r.labels = int_array(j.at("labels"), "labels", true);
      r.has_labels = true;
      GLM4_CHECK(r.labels.size() == r.input_ids.size(), "\"labels\" has ", r.labels.size(),
                 " entries but \"input_ids\" has ", r.input_ids.size());
    }
  }
  return r;
}

int64_t for_each_record(const std::string& path,
                        const std::function<void(const Record&, int64_t line)>& fn) {
  std::error_code ec;
  GLM4_CHECK(!fs::is_directory(path, ec), path, ": is a directory, expected a JSONL file");
  std::ifstream in(path, std::ios::binary);
  GLM4_CHECK(in.good(), "cannot open data file '", path, "'");
  std::string line;
  int64_t line_no = 0, records = 0;
  while (read_line(in, &line, kMaxRecordLineBytes)) {
    ++line_no;
    GLM4_CHECK(line.size() <= kMaxRecordLineBytes, path, ":", line_no, ": line is longer than ",
               kMaxRecordLineBytes, " bytes (limit kMaxRecordLineBytes)");
    if (line_no == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    try {
      fn(parse_record(line), line_no);
    } catch (const std::exception& e) {
      fail(path, ":", line_no, ": ", e.what());
    }
    ++records;
  }
  GLM4_CHECK(!in.bad(), "error reading data file '", path, "' after line ", line_no);
  return records;
}

}  // namespace glm4
