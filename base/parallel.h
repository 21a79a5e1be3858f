// The one place that includes TBB: parallel loops over index ranges.
#pragma once
#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include <cstdint>

namespace glm4 {

// The parallel loops the process has run (those started outside any other) and the wall time
// they took, since it started: a benchmark's difference of two readings tells how much of a
// stretch ran on one thread while the others waited between loops.
struct LoopClock {
  int64_t loops = 0;
  double seconds = 0;
};
LoopClock loop_clock();

namespace parallel_detail {
extern thread_local bool in_loop;  // this thread is running a chunk of a parallel loop
struct InLoop {
  bool outer = in_loop;
  InLoop() { in_loop = true; }
  ~InLoop() { in_loop = outer; }
  InLoop(const InLoop&) = delete;
  InLoop& operator=(const InLoop&) = delete;
};
int64_t now_ns();
void count_loop(int64_t ns);
}  // namespace parallel_detail

// fn(begin, end) over [0, n) in chunks of at least `grain` indices, on TBB's worker threads.
template <typename Fn>
void parallel_for(int64_t n, int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  if (n <= grain) {
    fn(int64_t{0}, n);
    return;
  }
  const bool outer = !parallel_detail::in_loop;  // a nested loop's time is its outer loop's
  const int64_t start = outer ? parallel_detail::now_ns() : 0;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain > 0 ? grain : 1),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      const parallel_detail::InLoop chunk;
                      fn(r.begin(), r.end());
                    });
  if (outer) parallel_detail::count_loop(parallel_detail::now_ns() - start);
}

// Number of threads parallel loops may use (TBB's arena limit).
int max_threads();
// Caps the threads for the rest of the process (the --threads flag, benchmarks).
void set_max_threads(int n);

}  // namespace glm4
