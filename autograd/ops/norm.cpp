// RMSNorm: y = w * x / sqrt(mean(x^2) + eps) over the last dimension, accumulated in fp32+.
#include <cmath>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "base/check.h"
#include "base/parallel.h"

namespace glm4::ops {

namespace {
constexpr int64_t kBlocks = 64;  // fixed reduction blocks: dw is the same for any thread count
}

Tensor rms_norm(const Tensor& x, const Tensor& w, float eps) {
  GLM4_CHECK(w.rank() == 1 && x.rank() >= 1 && x.dim(-1) == w.dim(0), "[rms_norm] input ",
             shape_str(x.shape()), " and weight ", shape_str(w.shape()));
  int64_t h = w.dim(0), rows = x.numel() / std::max<int64_t>(h, 1);
  Tensor y = Tensor::empty(x.shape());
  Tensor rstd = Tensor::empty({rows});
  const float* px = x.data();
  const float* pw = w.data();
  float* py = y.data();
  float* pr = rstd.data();
  parallel_for(rows, 8, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const float* xr = px + r * h;
      float ss = 0;
      for (int64_t j = 0; j < h; ++j) ss += xr[j] * xr[j];
      float inv = 1.0f / std::sqrt(ss / float(h) + eps);
      pr[r] = inv;
      for (int64_t j = 0; j < h; ++j) py[r * h + j] = pw[j] * (xr[j] * inv);
    }
  });
  return record(y, "rms_norm", {x, w}, {x.detach(), w.detach(), rstd}, {0},
                [h, rows](Node& n, const Tensor& g) {
                  const float* px = n.saved[0].data();
                  const float* pw = n.saved[1].data();
                  const float* pr = n.saved[2].data();
                  const float* pg = g.data();
                  Tensor dx, dw;
                  if (n.needs_grad(0)) {
                    dx = Tensor::empty(n.saved[0].shape());
                    float* pd = dx.data();
                    parallel_for(rows, 8, [&](int64_t lo, int64_t hi) {
                      for (int64_t r = lo; r < hi; ++r) {
                        const float* xr = px + r * h;
                        const float* gr = pg + r * h;
                        float inv = pr[r];
                        float dot = 0;  // mean over j of (g w)_j * xhat_j
                        for (int64_t j = 0; j < h; ++j) dot += gr[j] * pw[j] * xr[j] * inv;
                        dot /= float(h);
                        for (int64_t j = 0; j < h; ++j)
                          pd[r * h + j] = inv * (gr[j] * pw[j] - xr[j] * inv * dot);
                      }
                    });
                  }
                  if (n.needs_grad(1)) {
                    std::vector<float> partial(size_t(kBlocks * h), 0.0f);
                    int64_t per = (rows + kBlocks - 1) / kBlocks;
                    parallel_for(kBlocks, 1, [&](int64_t lo, int64_t hi) {
                      for (int64_t blk = lo; blk < hi; ++blk) {
                        float* acc = partial.data() + blk * h;
                        for (int64_t r = blk * per; r < std::min(rows, (blk + 1) * per); ++r)
                          for (int64_t j = 0; j < h; ++j)
                            acc[j] += pg[r * h + j] * px[r * h + j] * pr[r];
                      }
                    });
                    dw = Tensor::zeros({h});
                    float* pdw = dw.data();
                    for (int64_t blk = 0; blk < kBlocks; ++blk)
                      for (int64_t j = 0; j < h; ++j) pdw[j] += partial[blk * h + j];
                  }
                  return std::vector<Tensor>{dx, dw};
                });
}

}  // namespace glm4::ops
