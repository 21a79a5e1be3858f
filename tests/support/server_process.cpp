#include "tests/support/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

namespace glm4::testing {

namespace {
std::atomic<int> g_counter{0};
}

ServerProcess::ServerProcess(const std::vector<std::string>& args) {
  log_path_ = std::filesystem::temp_directory_path() / ("glm4_serve_" + std::to_string(::getpid()) +
                                                        "_" + std::to_string(g_counter++) + ".log");
  std::vector<std::string> argv_s = {GLM4_BINARY, "serve"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  argv_s.insert(argv_s.end(), {"--port", "0"});
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log = log_path_.string();
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) {                       // only async-signal-safe calls until exec
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
    if (::getppid() != parent) ::_exit(127);
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) ::_exit(127);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    std::istringstream lines(this->log());
    for (std::string line; std::getline(lines, line);) {
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.value("event", "") == "listening") {
        port_ = j.value("port", -1);
        return;
      }
    }
    int status;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // it ended before listening
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) stop(SIGTERM, std::chrono::seconds(10));
  std::error_code ec;
  std::filesystem::remove(log_path_, ec);
}

std::string ServerProcess::url() const {
  return "http://127.0.0.1:" + std::to_string(port_) + "/v1";
}

int ServerProcess::stop(int sig, std::chrono::seconds timeout) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, sig);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      pid_ = -1;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string ServerProcess::log() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int64_t ServerProcess::rss_kb() const {
  std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  return -1;
}

}  // namespace glm4::testing
