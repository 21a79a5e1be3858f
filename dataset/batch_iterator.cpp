// Epoch plans: the shuffled order, the rows (one example or packed examples each), the batches.
#include "dataset/batch_iterator.h"

#include <algorithm>
#include <numeric>

#include "base/check.h"

namespace glm4 {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound) {
  GLM4_DCHECK(bound > 0);
  // Reject the lowest 2^64 mod bound raw values so that every residue is equally likely.
  const uint64_t threshold = (0 - bound) % bound;
  uint64_t x;
  do x = rng();
  while (x < threshold);
  return x % bound;
}

uint64_t epoch_seed(uint64_t seed, int64_t epoch) {
  return splitmix64(seed ^ splitmix64(uint64_t(epoch)));
}

std::vector<int64_t> shuffled_order(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(size_t(std::max<int64_t>(n, 0)));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::mt19937_64 rng(epoch_seed(seed, epoch));
  for (int64_t i = n - 1; i >= 1; --i)
    std::swap(order[size_t(i)], order[size_t(uniform_below(rng, uint64_t(i) + 1))]);
  return order;
}

BatchIterator::BatchIterator(const std::vector<Example>& examples, BatchOptions options)
    : examples_(&examples), options_(options) {
  GLM4_CHECK(options_.batch_size > 0, "batch_size must be > 0, got ", options_.batch_size);
  GLM4_CHECK(options_.max_seq_length > 0, "max_seq_length must be > 0, got ",
             options_.max_seq_length);
  GLM4_CHECK(!examples.empty(), "the data set has no examples");
  for (size_t i = 0; i < examples.size(); ++i) {
    const Example& ex = examples[i];
    GLM4_CHECK(!ex.ids.empty() && ex.labels.size() == ex.ids.size(), "example ", i, " has ",
               ex.ids.size(), " ids and ", ex.labels.size(), " labels");
    GLM4_CHECK(int64_t(ex.ids.size()) <= options_.max_seq_length, "example ", i, " has ",
               ex.ids.size(), " tokens, more than max_seq_length ", options_.max_seq_length);
  }
  plan_epoch(0);
}

void BatchIterator::plan_epoch(int64_t epoch) {
  if (planned_epoch_ == epoch) return;
  const int64_t n = int64_t(examples_->size());
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = shuffled_order(n, options_.seed, epoch);
  } else {
    order.resize(size_t(n));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  rows_.clear();
  if (!options_.pack) {
    for (int64_t i : order) rows_.push_back({i});
  } else {  // greedy: an example that does not fit in the open row starts a new one
    int64_t used = 0;
    for (int64_t i : order) {
      const int64_t len = int64_t((*examples_)[size_t(i)].ids.size());
      if (rows_.empty() || used + len > options_.max_seq_length) {
        rows_.emplace_back();
        used = 0;
      }
      rows_.back().push_back(i);
      used += len;
    }
  }
  const int64_t rows = int64_t(rows_.size()), bs = options_.batch_size;
  batches_per_epoch_ = options_.drop_last ? rows / bs : (rows + bs - 1) / bs;
  GLM4_CHECK(batches_per_epoch_ > 0, "the data set has ", rows,
             options_.pack ? " packed rows" : " examples", ", fewer than batch_size ", bs,
             ": no complete batch");
  planned_epoch_ = epoch;
}

void BatchIterator::set_cursor(DataCursor cursor) {
  GLM4_CHECK(cursor.epoch >= 0 && cursor.position >= 0, "data cursor (epoch ", cursor.epoch,
             ", position ", cursor.position, ") is negative");
  plan_epoch(cursor.epoch);
  GLM4_CHECK(cursor.position <= batches_per_epoch_, "data cursor position ", cursor.position,
             " is past the ", batches_per_epoch_, " batches of epoch ", cursor.epoch);
  cursor_ = cursor;
}

Batch BatchIterator::next() {
  return make_batch(*examples_, next_rows(), options_.pack, options_.pad_id);
}

std::vector<std::vector<int64_t>> BatchIterator::next_rows() {
  plan_epoch(cursor_.epoch);
  if (cursor_.position >= batches_per_epoch_) {
    cursor_ = {cursor_.epoch + 1, 0};
    plan_epoch(cursor_.epoch);
  }
  const int64_t bs = options_.batch_size;
  const int64_t first = cursor_.position * bs;
  const int64_t last = std::min<int64_t>(first + bs, int64_t(rows_.size()));
  std::vector<std::vector<int64_t>> rows(rows_.begin() + first, rows_.begin() + last);
  ++cursor_.position;
  return rows;
}

}  // namespace glm4
