// The GLM-4.5 family's chat format: one list of pieces (special tokens, the template's <think>
// markers, text with its training target) gives both the text and the ids.
#include "io/tokenizer/glm45_chat.h"

#include "base/check.h"
#include "io/tokenizer/utf8.h"

namespace glm4 {
namespace {

// Marker: <think> or </think>, a special token when the vocabulary has it, else text.
enum class Kind { Text, Special, Marker };

struct Piece {
  Kind kind;
  std::string text;
  bool target;
  bool in_template_text = true;  // false for the <|endoftext|> appended for training
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

struct Writer {
  std::vector<Piece> pieces;
  void special(std::string token, bool target, bool in_template_text = true) {
    pieces.push_back({Kind::Special, std::move(token), target, in_template_text});
  }
  void marker(std::string token, bool target) {
    pieces.push_back({Kind::Marker, std::move(token), target});
  }
  void text(std::string text, bool target) {
    if (!text.empty()) pieces.push_back({Kind::Text, std::move(text), target});
  }
};

std::vector<Piece> glm45_pieces(ChatFormat format, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, const ChatOptions& options) {
  GLM4_CHECK(format == ChatFormat::Glm45 || format == ChatFormat::Glm47, "render_glm45: format ",
             chat_format_name(format), " is not the GLM-4.5 family's");
  const bool glm47 = format == ChatFormat::Glm47;
  const std::string role_newline = glm47 ? "" : "\n";
  Writer w;
  w.special("[gMASK]", false);
  w.special("<sop>", false);
  int64_t last_user = -1;
  for (size_t i = 0; i < messages.size(); ++i)
    if (messages[i].role == "user") last_user = int64_t(i);
  bool after_assistant = false;  // the next role token ends an assistant turn: a target
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
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
    } else {
      fail("chat template ", chat_format_name(format), ": message ", i, " has role '", m.role,
           "'; this format takes system, user and assistant (tool results are not ",
           "supported yet)");
    }
    after_assistant = m.role == "assistant";
  }
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
    w.special("<|endoftext|>", true, false);  // not the template's: the end a model learns
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

RenderedChat render_glm45(const Tokenizer& tok, ChatFormat format,
                          const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                          const ChatOptions& options) {
  RenderedChat chat;
  std::string run;  // text since the last special token, encoded whole
  bool run_target = false;
  auto flush = [&] {
    if (run.empty()) return;
    for (int32_t id : tok.encode(run)) {
      chat.ids.push_back(id);
      chat.target.push_back(run_target ? 1 : 0);
    }
    run.clear();
  };
  for (const Piece& p : glm45_pieces(format, messages, add_generation_prompt, options)) {
    std::optional<int32_t> id;
    if (p.kind != Kind::Text) id = tok.special_id(p.text);
    GLM4_CHECK(id || p.kind != Kind::Special, "chat template ", chat_format_name(format), ": the ",
               tok.kind(), " tokenizer has no special token '", p.text, "'");
    if (!id) {
      run += p.text;
      run_target = p.target;  // a run never mixes turns: targets agree within it
      continue;
    }
    flush();
    chat.ids.push_back(*id);
    chat.target.push_back(p.target ? 1 : 0);
  }
  flush();
  return chat;
}

}  // namespace glm4
