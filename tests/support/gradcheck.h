// Finite-difference gradient checking for tests: compares the autograd gradient of
// sum(fn(inputs) * R) (R fixed random) with central differences, per input.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace glm4::testing {

Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

struct GradCase {
  std::string name;
  std::vector<Shape> shapes;  // one random input per shape
  std::function<Tensor(const std::vector<Tensor>&)> fn;
  double tolerance = 1e-2;      // max |analytic - numeric| / max(|numeric|_inf, 1e-2)
  float eps = 1e-2f;            // central-difference step
  std::vector<int> skip = {};   // inputs not to differentiate
  float lo = -1.0f, hi = 1.0f;  // input value range
};

// Empty string when the gradients agree; otherwise a report naming the case, the input, its
// shape and the worst element.
std::string check_gradients(const GradCase& c, uint64_t seed = 1);

}  // namespace glm4::testing
