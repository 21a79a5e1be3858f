// A test hook for data-parallel runs: GLM4_FAULT=RANK:STEP:ACTION makes rank RANK, as it starts
// step STEP (1-based), raise an error (raise), kill itself with SIGKILL (kill) or change one
// parameter so the ranks diverge (perturb). Unset, it does nothing.
#pragma once
#include <cstdint>
#include <vector>

#include "autograd/tensor.h"

namespace glm4 {

void inject_fault(int rank, int64_t step, std::vector<Tensor>& params);

}  // namespace glm4
