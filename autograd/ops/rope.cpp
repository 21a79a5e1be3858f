// Partial rotary position embedding, interleaved pairs (2i, 2i+1) or rotate-half pairs
// (i, i + rotary_dim/2), at given per-pair frequencies with cos/sin scaled (YaRN); the backward
// is the inverse rotation.
#include <cmath>
#include <vector>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "base/check.h"
#include "base/parallel.h"

namespace glm4::ops {

namespace {
// out = scale * rotate(x) by +angle (sign 1) or -angle (sign -1); out may not alias x. Pair i is
// (2i, 2i+1) or (i, i + half) by `style`.
void rotate(const float* px, float* po, int64_t rows, int64_t heads, int64_t d,
            std::span<const int32_t> positions, const RopeFrequencies& f, float sign,
            RopeStyle style) {
  const int64_t half = int64_t(f.inv_freq.size()), rotary_dim = 2 * half;
  const bool interleaved = style == RopeStyle::Interleaved;
  parallel_for(rows, 4, [&](int64_t lo, int64_t hi) {
    std::vector<float> cs(size_t(2 * half));
    for (int64_t r = lo; r < hi; ++r) {
      float pos = float(positions[r]);
      for (int64_t i = 0; i < half; ++i) {
        float angle = pos * f.inv_freq[i];
        cs[2 * i] = float(std::cos(double(angle))) * f.scale;
        cs[2 * i + 1] = sign * (float(std::sin(double(angle))) * f.scale);
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

RopeFrequencies default_rope_frequencies(int64_t rotary_dim, double theta) {
  RopeFrequencies f;
  f.inv_freq.resize(size_t(rotary_dim / 2));
  for (int64_t i = 0; i < rotary_dim / 2; ++i)
    f.inv_freq[i] = float(1.0 / std::pow(theta, double(2 * i) / double(rotary_dim)));
  return f;
}

Tensor rope(const Tensor& x, std::span<const int32_t> positions, const RopeFrequencies& f,
            RopeStyle style) {
  GLM4_CHECK(x.rank() == 4, "[rope] input must be [B, T, H, D], got ", shape_str(x.shape()));
  int64_t rows = x.dim(0) * x.dim(1), heads = x.dim(2), d = x.dim(3);
  const int64_t rotary_dim = 2 * int64_t(f.inv_freq.size());
  GLM4_CHECK(rotary_dim > 0 && rotary_dim <= d, "[rope] rotary_dim ", rotary_dim,
             " (twice the frequencies) must be in (0, ", d, "] for input ", shape_str(x.shape()));
  GLM4_CHECK(int64_t(positions.size()) == rows, "[rope] ", positions.size(),
             " positions for input ", shape_str(x.shape()));
  Tensor y = Tensor::empty(x.shape());
  rotate(x.data(), y.data(), rows, heads, d, positions, f, 1.0f, style);
  std::vector<int32_t> pos(positions.begin(), positions.end());
  return record(y, "rope", {x}, {},
                [pos = std::move(pos), f, rows, heads, d, style](Node&, const Tensor& g) {
                  Tensor dx = Tensor::empty(g.shape());
                  rotate(g.data(), dx.data(), rows, heads, d, pos, f, -1.0f, style);
                  return std::vector<Tensor>{dx};
                });
}

Tensor rope(const Tensor& x, std::span<const int32_t> positions, int64_t rotary_dim, double theta,
            RopeStyle style) {
  GLM4_CHECK(x.rank() == 4, "[rope] input must be [B, T, H, D], got ", shape_str(x.shape()));
  GLM4_CHECK(rotary_dim % 2 == 0 && rotary_dim > 0 && rotary_dim <= x.dim(-1), "[rope] rotary_dim ",
             rotary_dim, " must be even and in (0, ", x.dim(-1), "] for input ",
             shape_str(x.shape()));
  return rope(x, positions, default_rope_frequencies(rotary_dim, theta), style);
}

}  // namespace glm4::ops
