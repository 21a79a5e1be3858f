// Builds the data sets' TextEncoder from a model directory's tokenizer and chat format. The
// tokenizer is loaded on first use, so pre-tokenized data needs no tokenizer files.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string_view>
#include <vector>

#include "io/tokenizer/chat_template.h"

namespace glm4 {

// How records become tokens; a data set needs no tokenizer of its own.
struct TextEncoder {
  std::function<std::vector<int32_t>(std::string_view)> encode;  // plain text, no specials
  // The whole conversation, starting with prefix_ids when the template writes them; the options
  // carry the record's tools.
  std::function<RenderedChat(const std::vector<ChatMessage>&, const ChatOptions&)> render_chat;
  std::vector<int32_t> prefix_ids;  // e.g. [gMASK]<sop> for GLM-4
  int32_t eos_id = -1;
};

TextEncoder make_text_encoder(const std::filesystem::path& model_dir);

}  // namespace glm4
