// The cheap check that data-parallel ranks still hold the same parameters: a 64-bit checksum of
// their bits on every rank, compared with rank 0's.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/tensor.h"
#include "train/distributed.h"

namespace glm4 {

// Of the parameters' bits, in order; the same on any thread count.
uint64_t parameter_checksum(const std::vector<Tensor>& params);

// Throws, naming the ranks whose parameters differ from rank 0's, when any do. `when` says at
// which point of the run ("after step 40").
void check_same_parameters(Distributed& group, const std::vector<Tensor>& params,
                           const std::string& when);

}  // namespace glm4
