// Perplexity of a model on token sequences: the token-weighted mean next-token cross-entropy.
#pragma once
#include <cstdint>
#include <vector>

#include "model/glm4_model.h"

namespace glm4 {

struct PerplexityResult {
  double loss = 0;        // mean cross-entropy (nats) over scored tokens
  double perplexity = 1;  // exp(loss)
  int64_t tokens = 0;     // scored tokens
};

// labels[t] is predicted from position t - 1 (t = 0 is never scored) and -100 is ignored.
// `labels_or_empty` is empty (labels = ids) or holds one list per example, each empty (labels =
// ids) or as long as its ids. Examples run `batch_size` at a time, right-padded, without a tape.
PerplexityResult perplexity(const Glm4Model& model, const std::vector<std::vector<int32_t>>& ids_per_example,
                            const std::vector<std::vector<int32_t>>& labels_or_empty, int64_t batch_size);

}  // namespace glm4
