// The training and model-writing progress bars.
#include "base/progress_bar.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

namespace glm4 {

ProgressBar::ProgressBar(int64_t first_step, int64_t total_steps, int64_t report_every, bool silent)
    : first_(first_step),
      total_(total_steps),
      every_(report_every),
      tty_(isatty(STDERR_FILENO)),
      silent_(silent),
      start_(std::chrono::steady_clock::now()) {}

void ProgressBar::update(int64_t step, double loss, double lr, double tokens_per_s) {
  if (silent_) return;
  int64_t done = step + 1;
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double per_step = elapsed / double(std::max<int64_t>(1, done - first_));
  int64_t eta = int64_t(per_step * double(total_ - done));
  char line[256];
  if (tty_) {
    const int width = 24;
    int filled = int(double(width) * double(done) / double(total_));
    std::string bar(size_t(filled), '#');
    bar.resize(width, '.');
    std::snprintf(line, sizeof line,
                  "\r[%s] %lld/%lld loss %.4f lr %.2e %.0f tok/s ETA %lldm%02llds ", bar.c_str(),
                  (long long)done, (long long)total_, loss, lr, tokens_per_s, (long long)(eta / 60),
                  (long long)(eta % 60));
    std::fputs(line, stderr);
  } else if (done % every_ == 0 || done == total_) {
    std::snprintf(line, sizeof line,
                  "step %lld/%lld loss %.4f lr %.2e %.0f tok/s ETA %lldm%02llds\n", (long long)done,
                  (long long)total_, loss, lr, tokens_per_s, (long long)(eta / 60),
                  (long long)(eta % 60));
    std::fputs(line, stderr);
  }
}

void ProgressBar::message(const std::string& text) {
  if (silent_) return;
  std::fprintf(stderr, tty_ ? "\r\033[K%s\n" : "%s\n", text.c_str());
}

void ProgressBar::finish() {
  if (tty_ && !silent_) std::fputs("\n", stderr);
}

WriteProgress::WriteProgress(std::string label, size_t total_bytes)
    : label_(std::move(label)),
      total_(std::max<size_t>(1, total_bytes)),
      tty_(isatty(STDERR_FILENO)),
      start_(std::chrono::steady_clock::now()) {}

void WriteProgress::add(size_t bytes, const std::string& what) {
  done_ = std::min(total_, done_ + bytes);
  const double frac = double(done_) / double(total_);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int64_t eta = frac > 0 ? int64_t(elapsed * (1 - frac) / frac) : 0;
  const bool gb = total_ >= size_t(1e9);  // else MB
  const double unit = gb ? 1e9 : 1e6;
  const char* name = gb ? "GB" : "MB";
  if (tty_) {
    const int width = 24;
    std::string bar(size_t(double(width) * frac), '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "\r\033[K%s [%s] %.2f/%.2f %s ETA %lldm%02llds %s", label_.c_str(),
                 bar.c_str(), double(done_) / unit, double(total_) / unit, name,
                 (long long)(eta / 60), (long long)(eta % 60), what.c_str());
  } else if (int(frac * 10) > last_tenth_) {
    last_tenth_ = int(frac * 10);
    std::fprintf(stderr, "%s %3.0f%% %.2f/%.2f %s (%s)\n", label_.c_str(), 100 * frac,
                 double(done_) / unit, double(total_) / unit, name, what.c_str());
  }
}

void WriteProgress::finish() {
  if (tty_) std::fputs("\n", stderr);
}

}  // namespace glm4
