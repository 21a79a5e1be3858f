// Chat turns and a rendered conversation with its training-target mask. The tokenizer layer
// declares the same two structs in io/chat_template.h; when that header is present it is the one
// definition, so train/ compiles before and after the two are merged.
#pragma once
#if __has_include("io/chat_template.h")
#include "io/chat_template.h"
#else
#include <cstdint>
#include <string>
#include <vector>

namespace glm4 {

struct ChatMessage {
  std::string role;  // system | user | assistant | observation
  std::string content;
};

struct RenderedChat {
  std::vector<int32_t> ids;
  std::vector<uint8_t> target;  // [ids.size()]: 1 where the token is a training target
};

}  // namespace glm4
#endif
