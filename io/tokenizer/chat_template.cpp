// Chat rendering at the id level (special tokens are placed as ids, never parsed out of text).
#include "io/tokenizer/chat_template.h"

#include <fstream>
#include <iterator>

#include "base/check.h"
#include "io/file/json_file.h"
#include "io/tokenizer/glm45_chat.h"
#include "io/tokenizer/python_json.h"

namespace glm4 {
namespace {

int32_t need_special(const Tokenizer& tok, std::string_view token, ChatFormat format) {
  const auto id = tok.special_id(token);
  GLM4_CHECK(id, "chat template ", chat_format_name(format), ": the ", tok.kind(),
             " tokenizer has no special token '", token, "'");
  return *id;
}

struct Builder {
  RenderedChat chat;
  bool in_tool_result = false;  // what is added now belongs to a tool result turn
  void add(int32_t id, bool target) {
    chat.ids.push_back(id);
    chat.target.push_back(target ? 1 : 0);
    chat.tool_result.push_back(in_tool_result ? 1 : 0);
  }
  void add(const std::vector<int32_t>& ids, bool target) {
    for (int32_t id : ids) add(id, target);
  }
};

// glm-4-9b-chat's system text for a message carrying tools: its preamble, then per function
// "## name", the function spec as tojson(indent=4) writes it, and the call instruction (the
// template's "\n\n## " loses a newline to trim_blocks, as transformers renders it).
std::string glm4_tools_text(const std::vector<std::string>& tools) {
  std::string text =
      "\n你是一个名为 ChatGLM 的人工智能助手。你是基于智谱AI训练的语言模型 GLM-4 "
      "模型开发的，你的任务是针对用户的问题和要求提供适当的答复和支持。\n\n# 可用工具";
  for (size_t i = 0; i < tools.size(); ++i) {
    const ordered_json tool = parse_ordered_json(tools[i]);
    GLM4_CHECK(tool.is_object() && tool.value("type", "") == "function" &&
                   tool.contains("function") && tool["function"].is_object() &&
                   tool["function"].contains("name") && tool["function"]["name"].is_string(),
               "chat template glm4: tools[", i,
               "] is not {\"type\": \"function\", \"function\": {\"name\": ...}}");
    const ordered_json& function = tool["function"];
    text += "\n## " + function["name"].get<std::string>() + "\n\n" +
            python_json_dumps(function, 4) + "\n在调用上述函数时，请使用 Json 格式表示调用的参数。";
  }
  return text;
}

// GLM-4-0414's tool turn: no preamble; per tool its function object (`tool.function`, or the tool
// itself when it has none) under "## name" as tojson(indent=4) writes it. trim_blocks leaves one
// "\n" before each "## ", so the first tool follows "# 可用工具\n" with a blank line.
std::string glm4_0414_tools_text(const std::vector<std::string>& tools) {
  std::string text = "\n# 可用工具\n";
  for (size_t i = 0; i < tools.size(); ++i) {
    const ordered_json tool = parse_ordered_json(tools[i]);
    const bool wrapped = tool.is_object() && tool.contains("function") &&
                         tool["function"].is_object() && !tool["function"].empty();
    const ordered_json& function = wrapped ? tool["function"] : tool;
    GLM4_CHECK(function.is_object() && function.contains("name") && function["name"].is_string(),
               "chat template glm4-0414: tools[", i,
               "] is neither {\"type\": \"function\", \"function\": {\"name\": ...}} nor a "
               "function {\"name\": ...}");
    text += "\n## " + function["name"].get<std::string>() + "\n\n" +
            python_json_dumps(function, 4) + "\n在调用上述函数时，请使用 Json 格式表示调用的参数。";
  }
  return text;
}

// GLM-4 (both formats) and ChatGLM3: role tokens, "\n", content.
RenderedChat render_role_tokens(const Tokenizer& tok, ChatFormat format,
                                const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, const ChatOptions& options) {
  const bool g0414 = format == ChatFormat::Glm40414;
  const bool glm4 = format == ChatFormat::Glm4 || g0414;
  GLM4_CHECK(glm4 || options.tools.empty(), "chat template ", chat_format_name(format),
             ": this format has no tool definitions (tools are for GLM-4 and later)");
  Builder b;
  b.add(need_special(tok, "[gMASK]", format), false);
  b.add(need_special(tok, glm4 ? "<sop>" : "sop", format), false);
  const std::vector<int32_t> newline = tok.encode("\n");
  const bool tools_on_system =
      !g0414 && !options.tools.empty() && !messages.empty() && messages.front().role == "system";
  if (!options.tools.empty()) {
    b.add(need_special(tok, "<|system|>", format), false);
    b.add(tok.encode(g0414 ? glm4_0414_tools_text(options.tools) : glm4_tools_text(options.tools)),
          false);
  }
  // The order the turns are written in: GLM-4-0414's template writes every system message first.
  std::vector<size_t> order;
  for (size_t i = 0; i < messages.size(); ++i)
    if (!g0414 || messages[i].role == "system") order.push_back(i);
  for (size_t i = 0; g0414 && i < messages.size(); ++i)
    if (messages[i].role != "system") order.push_back(i);
  bool after_assistant = false;  // the next role token ends an assistant turn
  for (size_t i : order) {
    const ChatMessage& m = messages[i];
    GLM4_CHECK(m.role == "system" || m.role == "user" || m.role == "assistant" ||
                   m.role == "observation" || m.role == "tool",
               "chat template: message ", i, " has unknown role '", m.role,
               "' (system, user, assistant, observation, tool)");
    GLM4_CHECK(glm4 || m.tool_calls.empty(), "chat template ", chat_format_name(format),
               ": message ", i, " has tool_calls; this format does not write them");
    // The template writes a system turn that carries the tools only when it has content.
    if (i == 0 && tools_on_system && m.content.empty()) continue;
    const bool assistant = m.role == "assistant";
    b.in_tool_result = false;
    if (!assistant || !m.content.empty() || m.tool_calls.empty()) {
      const std::string role = m.role == "tool" ? "observation" : m.role;
      b.add(need_special(tok, "<|" + role + "|>", format), after_assistant);
      b.in_tool_result = m.role == "tool" || m.role == "observation";
      // An assistant turn's "\n" is a target too: the generation prompt ends at <|assistant|>,
      // so the model has to produce it (as in mlx-lm's prompt masking and the official
      // recipes).
      if (glm4) {
        b.add(tok.encode("\n" + m.content), assistant);
      } else {
        b.add(newline, assistant);
        b.add(tok.encode(m.content), assistant);
      }
      after_assistant = assistant;
    }
    for (const ToolCall& call : m.tool_calls) {
      b.add(need_special(tok, "<|assistant|>", format), after_assistant);
      b.add(tok.encode(call.name + (g0414 ? " \n" : "\n") + call.arguments), true);
      after_assistant = true;
    }
  }
  b.in_tool_result = false;
  if (add_generation_prompt) {
    b.add(need_special(tok, "<|assistant|>", format), after_assistant);
  } else if (after_assistant) {
    const bool calls = !messages[order.back()].tool_calls.empty();
    b.add(need_special(tok,
                       calls  ? "<|observation|>"
                       : glm4 ? "<|endoftext|>"
                              : "</s>",
                       format),
          true);
  }
  return std::move(b.chat);
}

// ChatGLM2: plain-text rounds.
RenderedChat render_chatglm2(const Tokenizer& tok, const std::vector<ChatMessage>& messages,
                             bool add_generation_prompt, const ChatOptions& options) {
  const ChatFormat format = ChatFormat::ChatGlm2;
  GLM4_CHECK(options.tools.empty(), "chat template chatglm2: this format has no tools");
  Builder b;
  b.add(need_special(tok, "[gMASK]", format), false);
  b.add(need_special(tok, "sop", format), false);
  std::string prompt;
  const ChatMessage* final_answer = nullptr;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const bool user_turn = i % 2 == 0;
    GLM4_CHECK(m.role == (user_turn ? "user" : "assistant"), "chat template chatglm2: message ", i,
               " has role '", m.role,
               "'; ChatGLM2 needs user and assistant turns alternating, "
               "starting with user");
    if (user_turn) {
      prompt += str_cat("[Round ", i / 2 + 1, "]\n\n问：", m.content);
      if (i + 1 < messages.size() || add_generation_prompt) prompt += "\n\n答：";
    } else if (i + 1 < messages.size()) {
      prompt += m.content + "\n\n";
    } else {
      final_answer = &m;
    }
  }
  b.add(tok.encode(prompt), false);
  if (final_answer) {
    b.add(tok.encode(final_answer->content), true);
    b.add(need_special(tok, "</s>", format), true);
  }
  return std::move(b.chat);
}

}  // namespace

const char* chat_format_name(ChatFormat format) {
  switch (format) {
    case ChatFormat::Glm4:
      return "glm4";
    case ChatFormat::ChatGlm3:
      return "chatglm3";
    case ChatFormat::ChatGlm2:
      return "chatglm2";
    case ChatFormat::Glm45:
      return "glm45";
    case ChatFormat::Glm47:
      return "glm47";
    case ChatFormat::Glm40414:
      return "glm4-0414";
  }
  return "?";
}

bool calls_by_name_line(ChatFormat format) {
  return format == ChatFormat::Glm4 || format == ChatFormat::Glm40414;
}

ChatFormat detect_chat_format(const Tokenizer& tok) {
  const bool chatglm_sp = tok.kind() == "sentencepiece" && tok.special_id("sop").has_value();
  if (!chatglm_sp && tok.special_id("[gMASK]") && tok.special_id("<sop>") &&
      tok.special_id("<|user|>")) {
    return ChatFormat::Glm4;
  }
  if (tok.kind() == "sentencepiece" && tok.special_id("<|user|>")) return ChatFormat::ChatGlm3;
  return ChatFormat::ChatGlm2;
}

std::optional<ChatFormat> chat_format_of_template(std::string_view jinja) {
  const auto has = [&](std::string_view s) { return jinja.find(s) != std::string_view::npos; };
  if (!has("[gMASK]<sop>") || !has("<|assistant|>")) return std::nullopt;
  if (has("reasoning_content")) {
    if (has("/nothink")) return ChatFormat::Glm45;  // GLM-4.5 / 4.6's non-thinking user suffix
    if (has("</think>")) return ChatFormat::Glm47;
    return std::nullopt;
  }
  if (!has("# 可用工具") || has("think")) return std::nullopt;
  // GLM-4-0414: the call's name and a space before the arguments' line.
  if (has("<|assistant|>{{ meta }} \n")) return ChatFormat::Glm40414;
  if (has("你是一个名为 ChatGLM 的人工智能助手") && has("{{ item['metadata'] }}"))
    return ChatFormat::Glm4;  // glm-4-9b-chat
  return std::nullopt;
}

std::optional<ChatFormat> chat_format_of_model_dir(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::optional<std::string> jinja;
  if (fs::exists(dir / "chat_template.jinja")) {
    std::ifstream in(dir / "chat_template.jinja", std::ios::binary);
    jinja = std::string(std::istreambuf_iterator<char>(in), {});
  } else if (fs::exists(dir / "tokenizer_config.json")) {
    try {
      const nlohmann::json config = read_json_file(dir / "tokenizer_config.json");
      const auto t = config.find("chat_template");
      if (t != config.end() && t->is_string()) jinja = t->get<std::string>();
      if (t != config.end() && t->is_array())  // [{"name": "default", "template": ...}, ...]
        for (const auto& named : *t)
          if (named.is_object() && named.value("name", "") == "default" &&
              named.contains("template") && named["template"].is_string())
            jinja = named["template"].get<std::string>();
    } catch (const Error&) {  // the tokenizer loader reports a broken file
    }
  }
  if (jinja)
    if (std::optional<ChatFormat> format = chat_format_of_template(*jinja)) return format;
  if (fs::exists(dir / "config.json")) {
    try {
      const nlohmann::json config = read_json_file(dir / "config.json");
      if (config.is_object() && config.value("model_type", "") == "glm4_moe")
        return ChatFormat::Glm45;
      if (config.is_object() && config.value("model_type", "") == "glm4_moe_lite")
        return ChatFormat::Glm47;  // GLM-4.7-Flash
      if (config.is_object() && config.value("model_type", "") == "glm4")
        return ChatFormat::Glm40414;              // Glm4ForCausalLM: GLM-4-0414
    } catch (const Error&) {                      // the model loader reports a broken config.json
    } catch (const nlohmann::json::exception&) {  // model_type not a string
    }
  }
  return std::nullopt;
}

ChatFormat detect_chat_format(const Tokenizer& tok, const std::filesystem::path& model_dir) {
  return chat_format_of_model_dir(model_dir).value_or(detect_chat_format(tok));
}

RenderedChat render_chat(const Tokenizer& tok, ChatFormat format,
                         const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                         const ChatOptions& options) {
  if (format == ChatFormat::Glm45 || format == ChatFormat::Glm47)
    return render_glm45(tok, format, messages, add_generation_prompt, options);
  if (format == ChatFormat::ChatGlm2)
    return render_chatglm2(tok, messages, add_generation_prompt, options);
  return render_role_tokens(tok, format, messages, add_generation_prompt, options);
}

bool reply_starts_with_newline(ChatFormat format) {
  // Glm47's generation prompt ends <|assistant|><think> (or </think>): no newline.
  return format == ChatFormat::Glm4 || format == ChatFormat::Glm40414 ||
         format == ChatFormat::ChatGlm3 || format == ChatFormat::Glm45;
}

std::string ReplyText::push(const std::string& piece) {
  if (!at_start_ || piece.empty()) return piece;
  at_start_ = false;
  return piece[0] == '\n' ? piece.substr(1) : piece;
}

std::string ReplyText::whole(const std::string& text) { return push(text); }

std::vector<int32_t> stop_ids(const Tokenizer& tok, ChatFormat format) {
  switch (format) {
    case ChatFormat::Glm4:
    case ChatFormat::Glm40414:
    case ChatFormat::Glm45:
    case ChatFormat::Glm47:
      return {need_special(tok, "<|endoftext|>", format), need_special(tok, "<|user|>", format),
              need_special(tok, "<|observation|>", format)};
    case ChatFormat::ChatGlm3:
      return {need_special(tok, "</s>", format), need_special(tok, "<|user|>", format),
              need_special(tok, "<|observation|>", format)};
    case ChatFormat::ChatGlm2:
      return {need_special(tok, "</s>", format)};
  }
  return {};
}

std::vector<int32_t> prompt_prefix_ids(const Tokenizer& tok) {
  std::optional<int32_t> gmask = tok.special_id("[gMASK]");
  std::optional<int32_t> sop =
      tok.special_id("<sop>") ? tok.special_id("<sop>") : tok.special_id("sop");
  if (gmask && sop) return {*gmask, *sop};
  return {};
}

std::optional<int32_t> end_of_text_id(const Tokenizer& tok) {
  for (const char* name : {"<|endoftext|>", "</s>", "<eos>"})
    if (std::optional<int32_t> id = tok.special_id(name)) return id;
  return std::nullopt;
}

}  // namespace glm4
