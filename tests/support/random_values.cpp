#include "tests/support/random_values.h"

#include <random>

namespace glm4::testing {

std::vector<float> randn(size_t n, uint32_t seed, float std) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace glm4::testing
