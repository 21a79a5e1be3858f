#include "tests/support/random_values.h"

#include <algorithm>
#include <random>

#include "base/dtype.h"

namespace glm4::testing {

std::vector<float> randn(size_t n, uint32_t seed, float std) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<float> random_vec(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(size_t(std::max<int64_t>(n, 0)));
  for (float& x : v) x = u(rng);
  return v;
}

std::vector<uint16_t> random_bf16(int64_t n, uint32_t seed) {
  const std::vector<float> f = random_vec(n, seed);
  std::vector<uint16_t> w(f.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = f32_to_bf16(f[i]);
  return w;
}

}  // namespace glm4::testing
