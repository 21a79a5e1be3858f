// Command-line helpers the bench_* programs share.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace glm4::bench {

// "a,b,,c" -> {"a", "b", "c"}: a comma-separated list, empty items dropped.
inline std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// The value after the flag argv[i] (i moves onto it); exits with status 2 naming the flag
// when there is none.
inline std::string flag_value(int argc, char** argv, int& i) {
  if (i + 1 >= argc) {
    std::fprintf(stderr, "%s needs a value\n", argv[i]);
    std::exit(2);
  }
  return argv[++i];
}

}  // namespace glm4::bench
