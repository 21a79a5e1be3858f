// Cached generation held against full recomputation: the logits each token was drawn from,
// beside those of a plain forward over the whole sequence so far (for tests of KV caches).
#pragma once
#include <cstdint>
#include <vector>

#include "infer/generator.h"
#include "model/glm4_model.h"

namespace glm4::testing {

// Logits [V] of the last position of `ids` by a forward over the whole sequence, no cache.
std::vector<float> recompute_last(const Glm4Model& model, const std::vector<int32_t>& ids);

// Over a generation from `prompt` with `cfg` (the prompt's logits, then each drawn token's): the
// largest |cached - recomputed| logit, the largest |recomputed| one, the tokens drawn.
struct CachedDecodeGap {
  double worst = 0, largest = 0;
  int64_t drawn = 0;
};
CachedDecodeGap cached_decode_gap(const Glm4Model& model, const std::vector<int32_t>& prompt,
                                  const GenerationConfig& cfg);

}  // namespace glm4::testing
