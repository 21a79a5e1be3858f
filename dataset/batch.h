// One batch of examples laid out for a forward pass: right padding (or packing), positions, the
// attention mask, and the targets the loss sees (labels shifted by one). The one place that
// builds a padded, masked, shifted batch.
#pragma once
#include <cstdint>
#include <vector>

#include "autograd/attention_mask.h"
#include "dataset/dataset.h"

namespace glm4 {

// B rows of T tokens, row-major ([B*T] arrays), right-padded to the longest row.
struct Batch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> input_ids;  // [B*T], pad_id on padding
  std::vector<int32_t> labels;     // [B*T], kIgnoreLabel on padding and on every example's
                                   // first token (nothing predicts it; see Example)
  std::vector<int32_t> lengths;    // [B] tokens in each row before its padding
  std::vector<int32_t> positions;  // [B*T] t - seg_start: restarts at 0 for each example
  std::vector<int32_t> seg_start;  // [B*T] packing only (else empty): index of the first token
                                   // of the example holding t; a row's padding is a segment
                                   // of its own. Unpacked, every row is one segment from 0.
  std::vector<int32_t> targets;    // [B*T] labels shifted for next-token prediction:
                                   // targets[b*T + t] = labels[b*T + t + 1], kIgnoreLabel at T-1
  int64_t target_tokens = 0;       // t >= 1 with labels[b*T + t] != kIgnoreLabel: position t-1
                                   // predicts labels[t], so t = 0 never counts
};

// Causal, keys limited to [0, lengths[b]) and, when packed, to the query's own example.
AttentionMask attention_mask(const Batch& batch);

// Lays out rows (each a list of example indices, concatenated) as one batch.
Batch make_batch(const std::vector<Example>& examples,
                 const std::vector<std::vector<int64_t>>& rows, bool packed, int32_t pad_id);

// Rows [first, last) of `examples`, one example a row, padded with pad_id (evaluation batches).
Batch make_batch(const std::vector<Example>& examples, int64_t first, int64_t last, int32_t pad_id);

}  // namespace glm4
