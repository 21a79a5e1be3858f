// The machine's memory limit for decode-sized products: a streaming read of a buffer far larger
// than the last-level cache, on the threads parallel_for may use, best of `reps` runs (GB/s).
// The buffer sits in 2 MB pages, as loaded weights do: in 4 KB pages a virtual machine's nested
// page walks would make the probe measure the TLB rather than the memory.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <span>
#include <vector>

#include "base/memory.h"
#include "base/parallel.h"

namespace glm4::bench {

inline double bandwidth_probe_gbs(double gib = 2.0, int reps = 3) {
  const int64_t n = int64_t(gib * double(1 << 27));  // uint64 elements
  const size_t bytes = size_t(n) * sizeof(uint64_t);
  auto* data = static_cast<uint64_t*>(map_anonymous(bytes, "bandwidth probe"));
  std::span<uint64_t> buf(data, size_t(n));
  std::fill(buf.begin(), buf.end(), uint64_t{1});
  constexpr int64_t kChunks = 256;
  std::vector<uint64_t> sums(kChunks);
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    parallel_for(kChunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const uint64_t* p = buf.data() + c * (n / kChunks);
        uint64_t a = 0;
        for (int64_t i = 0; i < n / kChunks; ++i) a += p[i];
        sums[size_t(c)] = a;
      }
    });
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  unmap_anonymous(data, bytes);
  uint64_t total = 0;
  for (uint64_t v : sums) total += v;
  if (total != uint64_t(n / kChunks * kChunks)) std::fprintf(stderr, "bandwidth probe: bad sum\n");
  return double(n / kChunks * kChunks) * 8 / best / 1e9;
}

}  // namespace glm4::bench
