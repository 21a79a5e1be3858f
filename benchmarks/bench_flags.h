// Command-line helpers the bench_* programs share.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/strings.h"

namespace glm4::bench {

using glm4::split_commas;

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
