// Deterministic global gradient norm: fixed chunks summed in parallel, partials added in order.
#include "train/grad_clip.h"

#include <cmath>

#include "base/check.h"
#include "base/parallel.h"

namespace glm4 {

namespace {

constexpr int64_t kChunk = 1 << 16;

constexpr int kLanes = 8;  // independent accumulators, so the loop vectorises

// Sum of squares of p[begin, end): lane k takes the elements i with (i - begin) % 8 == k; the
// lanes are added in order at the end. A fixed association, so a fixed result.
double sum_squares_range(const float* p, int64_t begin, int64_t end) {
  double lane[kLanes] = {};
  int64_t i = begin;
  for (; i + kLanes <= end; i += kLanes)
    for (int k = 0; k < kLanes; ++k) lane[k] += double(p[i + k]) * double(p[i + k]);
  for (int k = 0; i < end; ++i, ++k) lane[k] += double(p[i]) * double(p[i]);
  double s = 0;
  for (double x : lane) s += x;
  return s;
}

}  // namespace

double sum_of_squares(const float* p, int64_t n) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(size_t(chunks), 0.0);
  parallel_for(chunks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c)
      partial[size_t(c)] = sum_squares_range(p, c * kChunk, std::min(n, (c + 1) * kChunk));
  });
  double s = 0;
  for (double x : partial) s += x;
  return s;
}

float clip_factor(double norm, double max_norm) {
  const double scale = max_norm / (norm + 1e-6);
  return scale >= 1.0 ? 1.0f : float(scale);
}

double grad_norm(const std::vector<Tensor>& params) {
  double total = 0;
  for (const Tensor& p : params) {
    if (!p.defined()) continue;
    Tensor g = p.grad();
    if (g.defined()) total += sum_of_squares(g.data(), g.numel());
  }
  return std::sqrt(total);
}

double clip_grad_norm(std::vector<Tensor>& params, double max_norm) {
  GLM4_CHECK(max_norm >= 0, "[clip_grad_norm] max_norm must be >= 0, got ", max_norm);
  const double norm = grad_norm(params);
  if (!std::isfinite(norm)) return norm;
  const float s = clip_factor(norm, max_norm);
  if (s == 1.0f) return norm;
  for (Tensor& p : params) {
    if (!p.defined()) continue;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    float* d = g.data();
    parallel_for(g.numel(), kChunk, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) d[i] *= s;
    });
  }
  return norm;
}

}  // namespace glm4
