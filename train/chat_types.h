// Chat turns and a rendered conversation with its training-target mask. The tokenizer branch
// declares the same two structs in io/chat_template.h; once both are merged, this header should
// just include that one.
#pragma once
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
