// Peak resident memory of this process, from getrusage.
#include "base/peak_rss.h"

#include <sys/resource.h>

namespace glm4 {

double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}

}  // namespace glm4
