// The GLM-4.5 family's chat format: one list of pieces (special tokens, the template's <think>
// markers, text with its training target) gives both the text and the ids.
#include "io/tokenizer/glm45_chat.h"

#include "base/check.h"
#include "io/tokenizer/python_json.h"
#include "io/tokenizer/utf8.h"

namespace glm4 {
namespace {

// Marker: a tag of the template (<think>, <tool_call>, <arg_key>, ...), a special token when the
// vocabulary has it (GLM-4.5's has them all), else text.
enum class Kind { Text, Special, Marker };

struct Piece {
  Kind kind;
  std::string text;
  bool target;
  bool in_template_text = true;  // false for the <|endoftext|> appended for training
  bool tool_result = false;      // part of a tool result turn (RenderedChat::tool_result)
};

bool python_isspace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

std::string_view trim_newlines(std::string_view s, bool left) {
  if (left) {
    while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  } else {
    while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  }
  return s;
}

// The template's split of "<think>r</think>content" when reasoning_content is not a string:
// reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n'),
// content = content.split('</think>')[-1].lstrip('\n').
void split_thinking(const ChatMessage& m, std::string& reasoning, std::string& content) {
  content = m.content;
  reasoning.clear();
  if (m.reasoning_content) {
    reasoning = *m.reasoning_content;
    return;
  }
  const size_t first_close = content.find("</think>");
  if (first_close == std::string::npos) return;
  std::string_view before = trim_newlines(std::string_view(content).substr(0, first_close), false);
  const size_t open = before.rfind("<think>");
  if (open != std::string_view::npos) before.remove_prefix(open + 7);
  reasoning = std::string(trim_newlines(before, true));
  content = std::string(
      trim_newlines(std::string_view(content).substr(content.rfind("</think>") + 8), true));
}

constexpr std::string_view kMarkers[] = {
    "<think>",    "</think>",    "<tool_call>",  "</tool_call>",    "<arg_key>",
    "</arg_key>", "<arg_value>", "</arg_value>", "<tool_response>", "</tool_response>"};

struct Writer {
  std::vector<Piece> pieces;
  bool in_tool_result = false;
  // The template's own text: its tags become markers, as encoding the rendered text splits there.
  void template_text(std::string_view text, bool target) {
    while (!text.empty()) {
      size_t at = text.size(), len = 0;
      for (std::string_view m : kMarkers)
        if (size_t p = text.find(m); p < at) at = p, len = m.size();
      this->text(std::string(text.substr(0, at)), target);
      if (len == 0) return;
      marker(std::string(text.substr(at, len)), target);
      text.remove_prefix(at + len);
    }
  }
  void special(std::string token, bool target, bool in_template_text = true) {
    pieces.push_back({Kind::Special, std::move(token), target, in_template_text, in_tool_result});
  }
  void marker(std::string token, bool target) {
    pieces.push_back({Kind::Marker, std::move(token), target, true, in_tool_result});
  }
  void text(std::string text, bool target) {
    if (!text.empty())
      pieces.push_back({Kind::Text, std::move(text), target, true, in_tool_result});
  }
};

// "<tool_call>name", then per argument <arg_key>k</arg_key><arg_value>v</arg_value> (strings
// raw, other values as tojson writes them), "</tool_call>"; Glm45 puts "\n" before the call and
// each tag line.
void write_call(Writer& w, bool glm47, const ToolCall& call, const std::string& where) {
  const std::string nl = glm47 ? "" : "\n";
  ordered_json args = ordered_json::object();
  if (!call.arguments.empty()) args = parse_ordered_json(call.arguments);
  GLM4_CHECK(args.is_object(), "chat template: ", where,
             " arguments are not a JSON object: ", call.arguments.substr(0, 80));
  w.text(nl, true);
  w.marker("<tool_call>", true);
  w.text(call.name + nl, true);
  for (const auto& [key, value] : args.items()) {
    w.marker("<arg_key>", true);
    w.text(key, true);
    w.marker("</arg_key>", true);
    w.text(nl, true);
    w.marker("<arg_value>", true);
    w.text(value.is_string() ? value.get<std::string>() : python_json_dumps(value), true);
    w.marker("</arg_value>", true);
    w.text(nl, true);
  }
  w.marker("</tool_call>", true);
}

std::vector<Piece> glm45_pieces(ChatFormat format, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, const ChatOptions& options) {
  GLM4_CHECK(format == ChatFormat::Glm45 || format == ChatFormat::Glm47, "render_glm45: format ",
             chat_format_name(format), " is not the GLM-4.5 family's");
  const bool glm47 = format == ChatFormat::Glm47;
  const std::string role_newline = glm47 ? "" : "\n";
  Writer w;
  w.special("[gMASK]", false);
  w.special("<sop>", false);
  if (!options.tools.empty()) {
    w.special("<|system|>", false);
    std::string text =
        "\n# Tools\n\nYou may call one or more functions to assist with the user "
        "query.\n\nYou are provided with function signatures within <tools></tools> "
        "XML tags:\n<tools>\n";
    for (size_t i = 0; i < options.tools.size(); ++i) {
      const ordered_json tool = parse_ordered_json(options.tools[i]);
      GLM4_CHECK(!tool.is_discarded(), "chat template ", chat_format_name(format), ": tools[", i,
                 "] is not JSON");
      text += python_json_dumps(tool) + "\n";
    }
    text +=
        "</tools>\n\nFor each function call, output the function name and arguments within "
        "the following XML format:\n";
    text += glm47
                ? "<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}"
                  "</arg_value><arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>"
                  "...</tool_call>"
                : "<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>"
                  "{arg-value-1}</arg_value>\n<arg_key>{arg-key-2}</arg_key>\n<arg_value>"
                  "{arg-value-2}</arg_value>\n...\n</tool_call>";
    w.template_text(text, false);
  }
  int64_t last_user = -1;
  for (size_t i = 0; i < messages.size(); ++i)
    if (messages[i].role == "user") last_user = int64_t(i);
  bool after_assistant = false;  // the next role token ends an assistant turn: a target
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    w.in_tool_result = false;
    if (m.role == "system" || m.role == "user") {
      w.special("<|" + m.role + "|>", after_assistant);
      w.text(role_newline + m.content, false);
      if (m.role == "user" && !glm47 && !options.enable_thinking &&
          !ends_with(m.content, "/nothink"))
        w.text("/nothink", false);
    } else if (m.role == "assistant") {
      w.special("<|assistant|>", after_assistant);
      std::string reasoning, content;
      split_thinking(m, reasoning, content);
      const bool keep = int64_t(i) > last_user && !reasoning.empty();
      w.text(role_newline, true);
      if (keep || !glm47) w.marker("<think>", true);
      if (keep) w.text(python_strip(reasoning), true);
      w.marker("</think>", true);
      const std::string answer = python_strip(content);
      if (!answer.empty()) w.text(role_newline + answer, true);
      for (size_t j = 0; j < m.tool_calls.size(); ++j)
        write_call(w, glm47, m.tool_calls[j], str_cat("message ", i, " tool_calls[", j, "]"));
    } else if (m.role == "tool" || m.role == "observation") {
      const bool first =
          i == 0 || (messages[i - 1].role != "tool" && messages[i - 1].role != "observation");
      if (first) w.special("<|observation|>", after_assistant);
      w.in_tool_result = true;  // what the tool answered (the role token ends the assistant's turn)
      w.text(role_newline, false);
      w.marker("<tool_response>", false);
      w.text(role_newline + m.content + role_newline, false);
      w.marker("</tool_response>", false);
    } else {
      fail("chat template ", chat_format_name(format), ": message ", i, " has role '", m.role,
           "'; this format takes system, user, assistant and tool");
    }
    after_assistant = m.role == "assistant";
  }
  w.in_tool_result = false;
  if (add_generation_prompt) {
    w.special("<|assistant|>", after_assistant);
    if (glm47) {
      w.marker(options.enable_thinking ? "<think>" : "</think>", false);
    } else if (!options.enable_thinking) {
      w.text("\n", false);
      w.marker("<think>", false);
      w.marker("</think>", false);
    }
  } else if (after_assistant) {
    // Not the template's: the end a model learns (<|observation|> after calls, to get results).
    w.special(messages.back().tool_calls.empty() ? "<|endoftext|>" : "<|observation|>", true,
              false);
  }
  return std::move(w.pieces);
}

}  // namespace

std::string python_strip(std::string_view s) {
  size_t begin = s.size(), end = 0;
  for (size_t i = 0; i < s.size();) {
    int len = 1;
    const uint32_t cp = utf8::decode(s, i, &len);
    if (cp == utf8::kInvalid || !python_isspace(cp)) {
      begin = std::min(begin, i);
      end = i + size_t(len);
    }
    i += size_t(len);
  }
  return begin < end ? std::string(s.substr(begin, end - begin)) : std::string();
}

std::string render_glm45_text(ChatFormat format, const std::vector<ChatMessage>& messages,
                              bool add_generation_prompt, const ChatOptions& options) {
  std::string out;
  for (const Piece& p : glm45_pieces(format, messages, add_generation_prompt, options))
    if (p.in_template_text) out += p.text;
  return out;
}

namespace {
RenderedChat encode_pieces(const Tokenizer& tok, ChatFormat format,
                           const std::vector<Piece>& pieces) {
  RenderedChat chat;
  std::string run;  // text since the last special token, encoded whole
  bool run_target = false, run_tool = false;
  auto flush = [&] {
    if (run.empty()) return;
    for (int32_t id : tok.encode(run)) {
      chat.ids.push_back(id);
      chat.target.push_back(run_target ? 1 : 0);
      chat.tool_result.push_back(run_tool ? 1 : 0);
    }
    run.clear();
  };
  for (const Piece& p : pieces) {
    std::optional<int32_t> id;
    if (p.kind != Kind::Text) id = tok.special_id(p.text);
    GLM4_CHECK(id || p.kind != Kind::Special, "chat template ", chat_format_name(format), ": the ",
               tok.kind(), " tokenizer has no special token '", p.text, "'");
    if (!id) {
      run += p.text;
      run_target = p.target;  // a run never mixes turns: targets agree within it
      run_tool = p.tool_result;
      continue;
    }
    flush();
    chat.ids.push_back(*id);
    chat.target.push_back(p.target ? 1 : 0);
    chat.tool_result.push_back(p.tool_result ? 1 : 0);
  }
  flush();
  return chat;
}
}  // namespace

RenderedChat render_glm45(const Tokenizer& tok, ChatFormat format,
                          const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                          const ChatOptions& options) {
  return encode_pieces(tok, format, glm45_pieces(format, messages, add_generation_prompt, options));
}

std::vector<int32_t> encode_template_text(const Tokenizer& tok, std::string_view text) {
  Writer w;
  w.template_text(text, false);
  return encode_pieces(tok, ChatFormat::Glm45, w.pieces).ids;
}

}  // namespace glm4
