// The one place that includes TBB: parallel loops over index ranges.
#pragma once
#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include <cstdint>

namespace glm4 {

// fn(begin, end) over [0, n) in chunks of at least `grain` indices, on TBB's worker threads.
template <typename Fn>
void parallel_for(int64_t n, int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  if (n <= grain) {
    fn(int64_t{0}, n);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain > 0 ? grain : 1),
                    [&](const tbb::blocked_range<int64_t>& r) { fn(r.begin(), r.end()); });
}

// Number of threads parallel loops may use (TBB's arena limit).
int max_threads();
// Caps the threads for the rest of the process (the --threads flag, benchmarks).
void set_max_threads(int n);

}  // namespace glm4
