// Reproducible normal random values for kernel tests.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace glm4::testing {

// n values drawn from N(0, std^2) by std::mt19937(seed).
std::vector<float> randn(size_t n, uint32_t seed, float std = 1.0f);

}  // namespace glm4::testing
