#include "base/parallel.h"

#include <tbb/info.h>

#include <memory>

namespace glm4 {

namespace {
std::unique_ptr<tbb::global_control>& thread_limit() {
  static std::unique_ptr<tbb::global_control> limit;
  return limit;
}
}  // namespace

int max_threads() {
  return int(tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism));
}

void set_max_threads(int n) {
  thread_limit().reset();
  if (n > 0)
    thread_limit() =
        std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, n);
}

}  // namespace glm4
