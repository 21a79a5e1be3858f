// Test helper: run a program (the glm4 binary, the example) through the shell and collect its
// exit status and output.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace glm4::testing {

struct Result {
  int status;          // exit status; 128 + signal when killed
  std::string output;  // stdout, and stderr unless stdout_only
};

Result run_program(const std::string& program, const std::vector<std::string>& args,
                   bool stdout_only = false);
// The same with `input` on its standard input.
Result run_program_with_input(const std::string& program, const std::vector<std::string>& args,
                              const std::string& input, bool stdout_only = false);
// The glm4 binary under test (GLM4_BINARY).
Result run(const std::vector<std::string>& args);
::testing::AssertionResult succeeds(const Result& r);
// The first line of the output: an error's "glm4: error: ..." line.
inline std::string first_line(const Result& r) { return r.output.substr(0, r.output.find('\n')); }

}  // namespace glm4::testing
