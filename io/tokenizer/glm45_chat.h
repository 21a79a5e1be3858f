// The GLM-4.5 family's chat format (GLM-4.5, GLM-4.5-Air, GLM-4.6: Glm45; GLM-4.7, GLM-4.7-Flash:
// Glm47), tools and tool calls included, as its Jinja chat template renders it
// (tests/data/chat_templates holds the templates and python3-jinja2's renderings that the tests
// compare against byte for byte).
//
// Glm45: [gMASK]<sop>, then <|system|>\n{content}; <|user|>\n{content} (+ "/nothink" when
// thinking is off, unless the content ends with it); <|assistant|>\n<think>{reasoning}</think>
// and \n{content} when the stripped content is not empty. The reasoning is written only for
// assistant turns after the last user turn (earlier ones get an empty <think></think>).
// Generation prompt <|assistant|>, + \n<think></think> when thinking is off.
// Glm47: the same turns without the "\n" after role tokens and without "/nothink"; a turn
// without kept reasoning writes </think> alone; generation prompt <|assistant|><think>, or
// <|assistant|></think> when thinking is off.
// Reasoning is the message's reasoning_content when set, else what content holds between
// <think> and </think> (then content is what follows the last </think>); both are stripped of
// surrounding whitespace as Python's str.strip() does.
// Tools (ChatOptions::tools): a <|system|> turn first, "# Tools" and one <tools> line per spec.
// Calls: after the answer, per call <tool_call>name, <arg_key>k</arg_key><arg_value>v
// </arg_value> per argument (strings raw, other values as JSON), </tool_call>; Glm45 puts "\n"
// before the call and each tag. Tool results: <|observation|> once per run of tool messages,
// each <tool_response>content</tool_response> (Glm45: "\n" inside the tags and before them).
#pragma once
#include <string>
#include <vector>

#include "io/tokenizer/chat_template.h"

namespace glm4 {

// The text the template writes. Throws glm4::Error for a role other than system, user, assistant
// and tool (or observation), or call arguments that are not a JSON object.
std::string render_glm45_text(ChatFormat format, const std::vector<ChatMessage>& messages,
                              bool add_generation_prompt, const ChatOptions& options);

// The same text as ids: role tokens by id, <think> and </think> by id when the tokenizer has
// them (else as text), each run of text between them encoded whole (as encoding the rendered
// text gives), message content never parsed for special tokens. Targets: everything an
// assistant turn writes after <|assistant|> and the token that ends it (the next role token, or
// <|endoftext|> appended after a final assistant turn without a generation prompt).
RenderedChat render_glm45(const Tokenizer& tokenizer, ChatFormat format,
                          const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                          const ChatOptions& options);

// Text the template would write (a prompt's extension, e.g. tool_call_prefill's) as ids: its tags
// (<think>, <tool_call>, <arg_key>, ...) by id when the tokenizer has them, the rest encoded.
std::vector<int32_t> encode_template_text(const Tokenizer& tokenizer, std::string_view text);

// Python's str.strip(): removes leading and trailing characters for which str.isspace() holds
// (ASCII whitespace, U+001C-U+001F, U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029,
// U+202F, U+205F, U+3000).
std::string python_strip(std::string_view s);

}  // namespace glm4
