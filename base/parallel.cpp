#include "base/parallel.h"

#include <tbb/info.h>

#include <atomic>
#include <chrono>
#include <memory>

namespace glm4 {

namespace {
std::unique_ptr<tbb::global_control>& thread_limit() {
  static std::unique_ptr<tbb::global_control> limit;
  return limit;
}
}  // namespace

namespace parallel_detail {
thread_local bool in_loop = false;

namespace {
std::atomic<int64_t> loops{0}, loop_ns{0};
}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void count_loop(int64_t ns) {
  loops.fetch_add(1, std::memory_order_relaxed);
  loop_ns.fetch_add(ns, std::memory_order_relaxed);
}
}  // namespace parallel_detail

LoopClock loop_clock() {
  return {parallel_detail::loops.load(std::memory_order_relaxed),
          1e-9 * double(parallel_detail::loop_ns.load(std::memory_order_relaxed))};
}

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
