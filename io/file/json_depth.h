// How deeply a JSON text nests arrays and objects, counted on the raw text before parsing.
// nlohmann::json copies, compares and prints values recursively, so every JSON file glm4 reads
// is refused above kMaxJsonDepth: a hostile file cannot exhaust the stack. Real files (configs,
// tokenizers, adapters, safetensors headers, data records) nest at most 6 deep.
#pragma once
#include <string>
#include <string_view>

namespace glm4 {

constexpr int kMaxJsonDepth = 64;

// The [ { ] } of a JSON text outside its strings, a character at a time (the text may come in
// pieces). Tolerates malformed text: depth may go below 0.
struct JsonBrackets {
  int depth = 0;
  bool in_string = false, escaped = false;
  void step(char c);  // advances by `c`; only brackets outside strings change depth
};

// The deepest nesting of [ and { outside strings (0 for a scalar). Tolerates malformed text:
// the parser reports that.
int json_nesting_depth(std::string_view text);

// Throws glm4::Error "<source>: JSON nests deeper than kMaxJsonDepth = 64 levels" when it does.
void check_json_depth(std::string_view text, const std::string& source);

}  // namespace glm4
