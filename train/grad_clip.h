// Global gradient-norm clipping with torch.nn.utils.clip_grad_norm_ semantics.
#pragma once
#include <vector>

#include "autograd/tensor.h"

namespace glm4 {

// L2 norm of all gradients together (parameters without a gradient are skipped), accumulated in
// double in a fixed order (independent of the thread count). When
// scale = max_norm / (norm + 1e-6) is below 1, every gradient is multiplied by float(scale).
// Returns the norm before clipping (0 when no parameter has a gradient). A non-finite norm
// leaves the gradients untouched and is returned so the caller can skip the step.
double clip_grad_norm(std::vector<Tensor>& params, double max_norm);

// The same norm without clipping.
double grad_norm(const std::vector<Tensor>& params);

// The pieces of both, for gradients split over data-parallel ranks: the sum of squares of
// p[0, n) in double (the fixed order grad_norm uses for one tensor), and the factor
// clip_grad_norm multiplies by (1 when no clipping is due).
double sum_of_squares(const float* p, int64_t n);
float clip_factor(double norm, double max_norm);

}  // namespace glm4
