// Training batches from a data set: deterministic shuffling per epoch, rows of one example or
// packed examples, and a cursor (epoch, position) that the training state saves so a resumed
// run sees the same batches.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "dataset/batch.h"

namespace glm4 {

struct BatchOptions {
  int64_t batch_size = 1;
  int64_t max_seq_length = 2048;  // packed row width; no example may be longer
  bool pack = false;              // concatenate whole examples (greedily, in epoch order) into rows
  bool shuffle = true;
  bool drop_last = true;  // an incomplete last batch is skipped (training) or kept (evaluation)
  uint64_t seed = 0;
  int32_t pad_id = 0;
};

// Where the next batch comes from: batch `position` of epoch `epoch`.
struct DataCursor {
  int64_t epoch = 0;
  int64_t position = 0;
  bool operator==(const DataCursor&) const = default;
};

// A uniform integer in [0, bound) from raw 64-bit engine outputs, by rejection: identical on
// every platform (unlike std::uniform_int_distribution).
uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound);

// The order of examples in `epoch`: Fisher-Yates (i from n-1 down to 1, swap i with
// uniform_below(i + 1)) driven by mt19937_64 seeded with epoch_seed(seed, epoch).
uint64_t epoch_seed(uint64_t seed, int64_t epoch);
std::vector<int64_t> shuffled_order(int64_t n, uint64_t seed, int64_t epoch);

class BatchIterator {
 public:
  // `examples` must outlive the iterator and each hold at most max_seq_length tokens.
  BatchIterator(const std::vector<Example>& examples, BatchOptions options);

  // The batch at the cursor; then the cursor moves on, into the next epoch after the last.
  Batch next();
  // The same batch as its rows (example indices each); next() is make_batch of these.
  std::vector<std::vector<int64_t>> next_rows();
  DataCursor cursor() const { return cursor_; }
  void set_cursor(DataCursor cursor);  // checked: epoch >= 0, position <= batches_per_epoch
  // Of the cursor's epoch: with packing the row count depends on the epoch's order.
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  // Rows (examples, or packed rows) of the current epoch, as example indices.
  const std::vector<std::vector<int64_t>>& rows() const { return rows_; }

 private:
  void plan_epoch(int64_t epoch);

  const std::vector<Example>* examples_;
  BatchOptions options_;
  DataCursor cursor_;
  int64_t planned_epoch_ = -1;
  std::vector<std::vector<int64_t>> rows_;
  int64_t batches_per_epoch_ = 0;
};

}  // namespace glm4
