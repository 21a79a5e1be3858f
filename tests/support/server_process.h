// Test helper: `glm4 serve` as a child process on a free loopback port (--port 0; the port comes
// from its "listening" line), stopped when the object dies, whatever the test did.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace glm4::testing {

class ServerProcess {
 public:
  // Runs GLM4_BINARY serve ARGS --port 0 and waits (up to 60 s) until it listens.
  explicit ServerProcess(const std::vector<std::string>& args);
  ~ServerProcess();  // SIGTERM, then SIGKILL after 10 s
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  bool listening() const { return port_ > 0; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string url() const;  // http://127.0.0.1:PORT/v1
  // Sends `sig` and waits for the exit: the exit status, 128 + signal when killed by one, or -1
  // when it did not end within `timeout` (it is then killed).
  int stop(int sig, std::chrono::seconds timeout = std::chrono::seconds(30));
  std::string log() const;  // stdout and stderr so far
  int64_t rss_kb() const;   // VmRSS now

 private:
  pid_t pid_ = -1;
  int port_ = -1;
  std::filesystem::path log_path_;
};

}  // namespace glm4::testing
