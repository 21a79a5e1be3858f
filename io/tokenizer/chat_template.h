// Chat prompts as token ids for GLM-4.5 / 4.6 / 4.7, GLM-4-0414, glm-4-9b-chat, ChatGLM3 and
// ChatGLM2, with a per-token training target mask, and the ids that end a generated reply.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/tokenizer/tokenizer.h"

namespace glm4 {

// One function call an assistant turn makes (OpenAI's tool_calls[i]).
struct ToolCall {
  std::string id;  // OpenAI's call id ("call_..."); not rendered
  std::string name;
  std::string arguments;  // a JSON object as text, as OpenAI sends it ("" counts as {})
};

struct ChatMessage {
  std::string role;  // system | user | assistant | tool (or observation: the same)
  std::string content;
  // An assistant turn's thinking (OpenAI-style `reasoning_content`). Only the GLM-4.5 family's
  // formats write it; unset there means "split <think>...</think> out of content", as the
  // template does. Other formats ignore it.
  std::optional<std::string> reasoning_content = std::nullopt;
  std::vector<ToolCall> tool_calls = {};  // an assistant turn's calls, after its text
  std::string tool_call_id = {};          // a tool result: the call it answers (not rendered)
};

// Glm45: GLM-4.5, GLM-4.5-Air, GLM-4.6 (io/tokenizer/glm45_chat.h); Glm47: GLM-4.7(-Flash);
// Glm40414: GLM-4-9B-0414, GLM-4-32B-0414; Glm4: glm-4-9b-chat; then ChatGLM3 and ChatGLM2.
enum class ChatFormat { Glm4, ChatGlm3, ChatGlm2, Glm45, Glm47, Glm40414 };

// "glm4", "chatglm3", "chatglm2", "glm45", "glm47", "glm4-0414"
const char* chat_format_name(ChatFormat format);

// Glm4 and Glm40414: a call is an assistant turn of its own, the function's name on the first
// line ("name\n", GLM-4-0414: "name \n") and the arguments' JSON after it.
bool calls_by_name_line(ChatFormat format);

// What the chat template's keyword arguments switch (chat_template_kwargs in the OpenAI API).
struct ChatOptions {
  // false: the GLM-4.5 family's non-thinking form (an empty <think></think> in the generation
  // prompt, "/nothink" after user turns for GLM-4.5/4.6); true is the templates' default.
  // Formats without thinking ignore it.
  bool enable_thinking = true;
  // The functions the model may call: each an OpenAI tool spec ({"type": "function",
  // "function": {"name", "description", "parameters"}}) as JSON text, keys in the order given
  // (the templates write them as given). Glm45 / Glm47 list them under "# Tools"; Glm4 in the
  // leading system turn, as glm-4-9b-chat's template does for a system message carrying
  // `tools` (an empty system turn is added when the conversation has none); Glm40414 in a system
  // turn of their own before all others, as GLM-4-0414's template does with its `tools`
  // argument. ChatGlm3 / ChatGlm2 refuse them.
  std::vector<std::string> tools = {};
};

// Glm4 when [gMASK], <sop> and <|user|> are single tokens (GLM-4 files and our trained
// sentencepiece models); ChatGlm3 for a sentencepiece model with <|user|>; else ChatGlm2.
ChatFormat detect_chat_format(const Tokenizer& tokenizer);

// The format a model directory asks for, when it says: its chat template text
// (chat_template.jinja, else tokenizer_config.json's "chat_template") if it is one this knows
// (chat_format_of_template); else config.json's model_type: "glm4_moe" gives Glm45,
// "glm4_moe_lite" (GLM-4.7-Flash) Glm47, "glm4" (Glm4ForCausalLM: GLM-4-0414) Glm40414 (a
// template this does not know, a modified one say, does not override the model type). nullopt
// otherwise, "chatglm" (glm-4-9b-chat) included (a missing or unreadable file is not an error
// here).
std::optional<ChatFormat> chat_format_of_model_dir(const std::filesystem::path& model_dir);
// Glm45 or Glm47 when the Jinja text is the GLM-4.5 family's template, Glm40414 when it is
// GLM-4-0414's, Glm4 when it is glm-4-9b-chat's, else nullopt.
std::optional<ChatFormat> chat_format_of_template(std::string_view jinja);

// chat_format_of_model_dir when it answers, else detect_chat_format(tokenizer).
ChatFormat detect_chat_format(const Tokenizer& tokenizer, const std::filesystem::path& model_dir);

struct RenderedChat {
  std::vector<int32_t> ids;
  std::vector<uint8_t> target;  // target[i] = 1 where ids[i] is something the model should produce
  // tool_result[i] = 1 where ids[i] is a tool result turn's text (after its role token, which
  // ends the assistant's turn and is a target): what a tool answered, never trained on, even when
  // training covers the prompt too.
  std::vector<uint8_t> tool_result;
};

// Glm4 / ChatGlm3: [gMASK] <sop>, then per message <|role|> + "\n" + content (a tool result is
// an <|observation|> turn); generation prompt <|assistant|>. Glm4 writes an assistant turn's
// calls as glm-4-9b-chat does: each its own <|assistant|> turn, name + "\n" + arguments text,
// after a turn with the text when there is some. Glm40414 is Glm4 with GLM-4-0414's differences:
// its own tool turn (no preamble), every system message first (then the others in order),
// name + " \n" before a call's arguments, and an empty first system turn written too. Targets:
// everything an assistant turn adds after its role token ("\n" and the content, which the model
// must generate after the prompt's <|assistant|>) and the token that ends the turn (the next role
// token, or the end-of-text token appended after a final assistant turn; <|observation|> instead
// after a final turn that calls tools, as the model must stop there for the results). GLM-4 encodes
// "\n" + content as one text (as the HF chat template does); ChatGLM3 encodes "\n" and content
// apart (as its build_single_message does). ChatGlm2: [gMASK] sop + the text "[Round
// N]\n\n问：{q}\n\n答：{a}\n\n..."; a final assistant answer is encoded apart and followed by </s>,
// both targets (earlier answers are prompt text, as in the official fine-tuning code). Glm45 /
// Glm47: see glm45_chat.h. Throws glm4::Error for an unknown role or a missing token.
RenderedChat render_chat(const Tokenizer& tokenizer, ChatFormat format,
                         const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                         const ChatOptions& options = {});

// Glm4, ChatGlm3 and Glm45 put "\n" after <|assistant|>: the model generates it (and learns it:
// render_chat's targets hold it), but it is not part of the answer.
bool reply_starts_with_newline(ChatFormat format);

// The text of a reply, piece by piece, without that leading "\n" (as GLM's own server strips it)
// when `strip_newline`; else unchanged.
class ReplyText {
 public:
  explicit ReplyText(bool strip_newline) : at_start_(strip_newline) {}
  std::string push(const std::string& piece);  // the piece as the answer shows it
  std::string whole(const std::string& text);  // a whole reply (a fresh object's first push)

 private:
  bool at_start_;  // no text seen yet, and a leading "\n" is to go
};

// Ids that end a generated reply. Glm4, Glm45, Glm47: <|endoftext|>, <|user|>, <|observation|>;
// ChatGlm3: </s>, <|user|>, <|observation|>; ChatGlm2: </s>.
std::vector<int32_t> stop_ids(const Tokenizer& tokenizer, ChatFormat format);

// What Hugging Face's encode puts before plain text for GLM models: [gMASK] <sop> (ChatGLM2/3
// spell the second "sop"); empty when the tokenizer lacks either.
std::vector<int32_t> prompt_prefix_ids(const Tokenizer& tokenizer);

// The end-of-text token: <|endoftext|>, </s> or <eos>, whichever the tokenizer has first.
std::optional<int32_t> end_of_text_id(const Tokenizer& tokenizer);

}  // namespace glm4
