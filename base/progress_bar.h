// Progress on stderr: a bar for training (step, loss, lr, tokens/s, ETA) and one for writing a
// model, on a terminal, or plain report lines when stderr is not one.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace glm4 {

class ProgressBar {
 public:
  // A silent bar prints nothing (the ranks other than 0 of a data-parallel run).
  ProgressBar(int64_t first_step, int64_t total_steps, int64_t report_every, bool silent = false);
  // `loss`: what the line shows (the trainer passes the mean since the last report).
  void update(int64_t step, double loss, double lr, double tokens_per_s);
  void message(const std::string& text);  // a line of its own above the bar
  void finish();

 private:
  int64_t first_, total_, every_;
  bool tty_, silent_;
  std::chrono::steady_clock::time_point start_;
};

// Progress of writing a model (quantize, init, fuse): a bar with bytes done, the tensor at
// hand and the ETA on a terminal, plain lines at every tenth otherwise.
class WriteProgress {
 public:
  WriteProgress(std::string label, size_t total_bytes);
  void add(size_t bytes, const std::string& what);
  void finish();

 private:
  std::string label_;
  size_t total_, done_ = 0;
  int last_tenth_ = -1;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace glm4
