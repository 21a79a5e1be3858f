// Partial rotary position embedding, interleaved pairs (2i, 2i+1) or rotate-half pairs
// (i, i + rotary_dim/2); the backward is the inverse rotation.
#include <cmath>
#include <vector>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "base/check.h"
#include "base/parallel.h"

namespace glm4::ops {

namespace {
// inv_freq[i] = theta^(-2i / rotary_dim), rounded to fp32 as the reference computes it.
std::vector<float> inverse_frequencies(int64_t rotary_dim, double theta) {
  std::vector<float> f(size_t(rotary_dim / 2));
  for (int64_t i = 0; i < rotary_dim / 2; ++i)
    f[i] = float(1.0 / std::pow(theta, double(2 * i) / double(rotary_dim)));
  return f;
}

// out = rotate(x) by +angle (sign 1) or -angle (sign -1); out may not alias x. Pair i is
// (2i, 2i+1) or (i, i + half) by `style`.
void rotate(const float* px, float* po, int64_t rows, int64_t heads, int64_t d,
            std::span<const int32_t> positions, int64_t rotary_dim,
            const std::vector<float>& inv_freq, float sign, RopeStyle style) {
  int64_t half = rotary_dim / 2;
  const bool interleaved = style == RopeStyle::Interleaved;
  parallel_for(rows, 4, [&](int64_t lo, int64_t hi) {
    std::vector<float> cs(size_t(2 * half));
    for (int64_t r = lo; r < hi; ++r) {
      float pos = float(positions[r]);
      for (int64_t i = 0; i < half; ++i) {
        float angle = pos * inv_freq[i];
        cs[2 * i] = float(std::cos(double(angle)));
        cs[2 * i + 1] = sign * float(std::sin(double(angle)));
      }
      for (int64_t h = 0; h < heads; ++h) {
        const float* xr = px + (r * heads + h) * d;
        float* yr = po + (r * heads + h) * d;
        if (interleaved) {
          for (int64_t i = 0; i < half; ++i) {
            float c = cs[2 * i], s = cs[2 * i + 1];
            float a = xr[2 * i], b = xr[2 * i + 1];
            yr[2 * i] = a * c - b * s;
            yr[2 * i + 1] = b * c + a * s;
          }
        } else {
          for (int64_t i = 0; i < half; ++i) {
            float c = cs[2 * i], s = cs[2 * i + 1];
            float a = xr[i], b = xr[i + half];
            yr[i] = a * c - b * s;
            yr[i + half] = b * c + a * s;
          }
        }
        for (int64_t j = rotary_dim; j < d; ++j) yr[j] = xr[j];
      }
    }
  });
}
}  // namespace

Tensor rope(const Tensor& x, std::span<const int32_t> positions, int64_t rotary_dim, double theta,
            RopeStyle style) {
  GLM4_CHECK(x.rank() == 4, "[rope] input must be [B, T, H, D], got ", shape_str(x.shape()));
  int64_t rows = x.dim(0) * x.dim(1), heads = x.dim(2), d = x.dim(3);
  GLM4_CHECK(rotary_dim % 2 == 0 && rotary_dim > 0 && rotary_dim <= d, "[rope] rotary_dim ",
             rotary_dim, " must be even and in (0, ", d, "] for input ", shape_str(x.shape()));
  GLM4_CHECK(int64_t(positions.size()) == rows, "[rope] ", positions.size(),
             " positions for input ", shape_str(x.shape()));
  std::vector<float> inv_freq = inverse_frequencies(rotary_dim, theta);
  Tensor y = Tensor::empty(x.shape());
  rotate(x.data(), y.data(), rows, heads, d, positions, rotary_dim, inv_freq, 1.0f, style);
  std::vector<int32_t> pos(positions.begin(), positions.end());
  return record(
      y, "rope", {x}, {},
      [pos = std::move(pos), inv_freq, rows, heads, d, rotary_dim, style](Node&, const Tensor& g) {
        Tensor dx = Tensor::empty(g.shape());
        rotate(g.data(), dx.data(), rows, heads, d, pos, rotary_dim, inv_freq, -1.0f, style);
        return std::vector<Tensor>{dx};
      });
}

}  // namespace glm4::ops
