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

// max |ours - ref| / max |ref| over ours's values (max_relative_error of fixture_logits.h).
double max_relative_error(const Tensor& ours, const std::vector<float>& ref);

}  // namespace glm4::testing
