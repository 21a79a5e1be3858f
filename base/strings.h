// Small string helpers every layer uses: comma lists, trimming, joining.
#pragma once
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

namespace glm4 {

// "a,b,,c" -> {"a", "b", "c"}: a comma-separated list, empty items dropped.
inline std::vector<std::string> split_commas(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string_view::npos) end = s.size();
    if (end > start) out.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// `s` without leading and trailing ASCII whitespace.
inline std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

// {"a", "b"} -> "a,b" (with `sep`).
inline std::string join(const std::vector<std::string>& items, std::string_view sep = ",") {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += items[i];
  }
  return out;
}

}  // namespace glm4
