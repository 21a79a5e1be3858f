#include "autograd/kernels/vec_math.h"

#include <algorithm>

namespace glm4::kernels {

double exp_shifted(const float* x, float shift, float* out, int64_t n) {
  constexpr int64_t L = simd::kLanes;
  const simd::VecF s = simd::set1(shift);
  simd::VecF acc = simd::zero();
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    simd::VecF e = simd::exp(simd::sub(simd::load(x + i), s));
    simd::store(out + i, e);
    acc = simd::add(acc, e);
  }
  double sum = 0;
  alignas(64) float lanes[L];
  simd::store(lanes, acc);
  for (int64_t l = 0; l < L; ++l) sum += double(lanes[l]);
  for (; i < n; ++i) sum += double(out[i] = simd::exp1(x[i] - shift));
  return sum;
}

float max_of(const float* x, int64_t n) {
  constexpr int64_t L = simd::kLanes;
  float m = -INFINITY;
  int64_t i = 0;
  if (n >= L) {
    simd::VecF acc = simd::load(x);
    for (i = L; i + L <= n; i += L) acc = simd::max(acc, simd::load(x + i));
    m = simd::hmax(acc);
  }
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

void scale_in_place(float* x, int64_t n, float c) {
  constexpr int64_t L = simd::kLanes;
  const simd::VecF s = simd::set1(c);
  int64_t i = 0;
  for (; i + L <= n; i += L) simd::store(x + i, simd::mul(simd::load(x + i), s));
  for (; i < n; ++i) x[i] *= c;
}

void sigmoid(const float* x, float* out, int64_t n) {
  constexpr int64_t L = simd::kLanes;
  const simd::VecF one = simd::set1(1.0f), zero = simd::zero();
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    simd::VecF e = simd::exp(simd::sub(zero, simd::load(x + i)));
    simd::store(out + i, simd::div(one, simd::add(one, e)));
  }
  for (; i < n; ++i) out[i] = 1.0f / (1.0f + simd::exp1(-x[i]));
}

}  // namespace glm4::kernels
