// Reproducible random values for kernel tests.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace glm4::testing {

// n values drawn from N(0, std^2) by std::mt19937(seed).
std::vector<float> randn(size_t n, uint32_t seed, float std = 1.0f);

// n values drawn from U(-1, 1) by std::mt19937(seed) (none for n <= 0).
std::vector<float> random_vec(int64_t n, uint32_t seed);
// random_vec(n, seed) rounded to bf16 (round to nearest even), as uint16 bits.
std::vector<uint16_t> random_bf16(int64_t n, uint32_t seed);

}  // namespace glm4::testing
