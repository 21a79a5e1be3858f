#include "io/file/json_depth.h"

#include <algorithm>

#include "base/check.h"

namespace glm4 {

void JsonBrackets::step(char c) {
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
    ++depth;
  } else if (c == ']' || c == '}') {
    --depth;
  }
}

int json_nesting_depth(std::string_view text) {
  JsonBrackets brackets;
  int deepest = 0;
  for (char c : text) {
    brackets.step(c);
    deepest = std::max(deepest, brackets.depth);
  }
  return deepest;
}

void check_json_depth(std::string_view text, const std::string& source) {
  const int depth = json_nesting_depth(text);
  GLM4_CHECK(depth <= kMaxJsonDepth, source, ": JSON nests ", depth,
             " levels deep (limit kMaxJsonDepth = ", kMaxJsonDepth, ")");
}

}  // namespace glm4
