#include "io/file/json_depth.h"

#include <algorithm>

#include "base/check.h"

namespace glm4 {

int json_nesting_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

void check_json_depth(std::string_view text, const std::string& source) {
  const int depth = json_nesting_depth(text);
  GLM4_CHECK(depth <= kMaxJsonDepth, source, ": JSON nests ", depth,
             " levels deep (limit kMaxJsonDepth = ", kMaxJsonDepth, ")");
}

}  // namespace glm4
