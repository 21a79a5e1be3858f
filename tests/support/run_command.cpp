#include "tests/support/run_command.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace glm4::testing {

namespace {
std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

Result run_shell(const std::string& program, const std::vector<std::string>& args,
                 const std::string& redirect, bool stdout_only) {
  std::string cmd = quote(program);
  for (const auto& a : args) cmd.append(" ").append(quote(a));
  cmd += redirect + (stdout_only ? " 2>/dev/null" : " 2>&1");
  FILE* p = ::popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr) << cmd;
  if (!p) return {-1, ""};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}
}  // namespace

Result run_program(const std::string& program, const std::vector<std::string>& args,
                   bool stdout_only) {
  return run_shell(program, args, "", stdout_only);
}

Result run_program_with_input(const std::string& program, const std::vector<std::string>& args,
                              const std::string& input, bool stdout_only) {
  char path[] = "/tmp/glm4_stdin_XXXXXX";
  int fd = ::mkstemp(path);
  EXPECT_GE(fd, 0);
  if (fd < 0) return {-1, ""};
  EXPECT_EQ(::write(fd, input.data(), input.size()), ssize_t(input.size()));
  ::close(fd);
  Result r = run_shell(program, args, std::string(" < ") + quote(path), stdout_only);
  ::unlink(path);
  return r;
}

Result run(const std::vector<std::string>& args) { return run_program(GLM4_BINARY, args); }

::testing::AssertionResult succeeds(const Result& r) {
  if (r.status == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "exit status " << r.status << ": " << r.output;
}

}  // namespace glm4::testing
