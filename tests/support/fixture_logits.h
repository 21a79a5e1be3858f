// Logits of a reference fixture's right-padded batch (its `input_ids` and `lengths`), of a fixed
// short prompt (the load tests' bit-for-bit comparisons), and the error measure the parity tests
// compare them with.
#pragma once
#include <string>
#include <vector>

#include "model/glm4_model.h"

namespace glm4::testing {

// Logits [B, T, V] of the batch in `fixture_file`, flattened.
std::vector<float> fixture_batch_logits(const Glm4Model& model, const std::string& fixture_file);

// Logits [6, V] of the prompt 5 17 200 3 9 41, one sequence, no cache, flattened.
std::vector<float> short_prompt_logits(const Glm4Model& model);

// max |a - b|, and that over max |b|; a and b must have the same size.
double max_abs_error(const std::vector<float>& a, const std::vector<float>& b);
double max_relative_error(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace glm4::testing
