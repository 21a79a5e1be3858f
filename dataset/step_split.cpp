#include "dataset/step_split.h"

#include <algorithm>

#include "base/check.h"

namespace glm4 {

std::vector<RowSlice> rank_rows(const std::vector<int64_t>& batch_rows, int rank, int ranks) {
  GLM4_CHECK(ranks > 0 && rank >= 0 && rank < ranks, "[rank_rows] rank ", rank, " of ", ranks);
  int64_t total = 0;
  for (int64_t n : batch_rows) total += n;
  const int64_t first = total * rank / ranks, last = total * (rank + 1) / ranks;
  std::vector<RowSlice> out;
  int64_t at = 0;  // global index of the batch's first row
  for (size_t b = 0; b < batch_rows.size(); at += batch_rows[b], ++b) {
    const int64_t lo = std::max(first, at), hi = std::min(last, at + batch_rows[b]);
    if (lo < hi) out.push_back({int64_t(b), lo - at, hi - at});
  }
  return out;
}

}  // namespace glm4
