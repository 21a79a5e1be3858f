// The training batches of a PyTorch reference fixture (tools/reference/reference.py writes
// `step{S}.micro{M}.{input_ids,labels,lengths}`), and the error measure for a tensor against it.
#pragma once
#include <vector>

#include "autograd/tensor.h"
#include "dataset/batch.h"
#include "io/safetensors.h"

namespace glm4::testing {

// Micro-batch `micro` of step `step`, padded to its longest row (not to the fixture's width).
Batch fixture_train_batch(const SafetensorsFile& file, int step, int micro);

// max |ours - ref|, and that over max |ref|, over ours's values (as fixture_logits.h's).
double max_abs_error(const Tensor& ours, const std::vector<float>& ref);
double max_relative_error(const Tensor& ours, const std::vector<float>& ref);

}  // namespace glm4::testing
