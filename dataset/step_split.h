// Which rows of a training step a rank reads: a pure function of the step's batches (from the
// global data cursor), the rank and the number of ranks, so any rank count resumes anywhere.
#pragma once
#include <cstdint>
#include <vector>

namespace glm4 {

// Rows [begin, end) of batch `batch` of the step; one micro-batch of a rank.
struct RowSlice {
  int64_t batch = 0;
  int64_t begin = 0, end = 0;
  bool operator==(const RowSlice&) const = default;
};

// The step's rows, batch after batch, cut into `ranks` contiguous runs (rank r gets rows
// [r * R / ranks, (r + 1) * R / ranks) of the R rows); a rank's micro-batches are its run cut
// at batch boundaries. One rank gets exactly the step's batches. When `ranks` divides the batch
// count, each rank gets whole batches; a rank may get no rows when R < ranks.
std::vector<RowSlice> rank_rows(const std::vector<int64_t>& batch_rows, int rank, int ranks);

}  // namespace glm4
