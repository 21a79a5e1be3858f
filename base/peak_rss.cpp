// Peak resident memory of this process: Linux's VmHWM, which reset_peak_rss starts over.
#include "base/peak_rss.h"

#include <sys/resource.h>

#include <fstream>
#include <string>

namespace glm4 {

double peak_rss_mb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // KiB
  rusage usage{};  // no /proc: the peak since the start
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}

void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

}  // namespace glm4
