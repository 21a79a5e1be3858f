// The layout of one batch: padding or packing, positions, mask, shifted targets.
#include "dataset/batch.h"

#include <algorithm>
#include <numeric>

#include "base/check.h"

namespace glm4 {

AttentionMask attention_mask(const Batch& batch) {
  AttentionMask mask;
  mask.causal = true;
  mask.kv_end = batch.lengths;
  mask.seg_start = batch.seg_start;
  return mask;
}

Batch make_batch(const std::vector<Example>& examples,
                 const std::vector<std::vector<int64_t>>& rows, bool packed, int32_t pad_id) {
  Batch b;
  b.B = int64_t(rows.size());
  b.lengths.resize(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    int64_t len = 0;
    for (int64_t i : rows[r]) {
      GLM4_CHECK(i >= 0 && i < int64_t(examples.size()), "[make_batch] example index ", i,
                 " is outside the ", examples.size(), " examples");
      len += int64_t(examples[size_t(i)].ids.size());
    }
    b.lengths[r] = int32_t(len);
    b.T = std::max(b.T, len);
  }
  const size_t n = size_t(b.B * b.T);
  b.input_ids.assign(n, pad_id);
  b.labels.assign(n, kIgnoreLabel);
  b.targets.assign(n, kIgnoreLabel);
  b.positions.assign(n, 0);
  if (packed) b.seg_start.assign(n, 0);
  for (size_t r = 0; r < rows.size(); ++r) {
    const size_t row = r * size_t(b.T);
    int64_t t = 0;
    for (int64_t i : rows[r]) {
      const Example& ex = examples[size_t(i)];
      const int64_t start = t;
      for (size_t k = 0; k < ex.ids.size(); ++k, ++t) {
        b.input_ids[row + t] = ex.ids[k];
        b.labels[row + t] = k == 0 ? kIgnoreLabel : ex.labels[k];
        b.positions[row + t] = int32_t(t - start);
        if (packed) b.seg_start[row + t] = int32_t(start);
      }
    }
    const int64_t pad_start = packed ? t : 0;  // padding: a segment of its own when packed
    for (; t < b.T; ++t) {
      b.positions[row + t] = int32_t(t - pad_start);
      if (packed) b.seg_start[row + t] = int32_t(pad_start);
    }
    for (int64_t k = 1; k < b.T; ++k) {
      b.targets[row + k - 1] = b.labels[row + k];
      b.target_tokens += b.labels[row + k] != kIgnoreLabel;
    }
  }
  return b;
}

Batch make_batch(const std::vector<Example>& examples, int64_t first, int64_t last,
                 int32_t pad_id) {
  GLM4_CHECK(0 <= first && first < last && last <= int64_t(examples.size()), "[make_batch] rows [",
             first, ", ", last, ") of ", examples.size(), " examples");
  std::vector<std::vector<int64_t>> rows;
  for (int64_t i = first; i < last; ++i) rows.push_back({i});
  return make_batch(examples, rows, /*packed=*/false, pad_id);
}

}  // namespace glm4
