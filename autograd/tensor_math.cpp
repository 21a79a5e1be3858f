#include "autograd/tensor_math.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "base/check.h"
#include "base/parallel.h"

namespace glm4 {

namespace {
constexpr int64_t kGrain = 1 << 15;
}

Tensor add_values(const Tensor& a, const Tensor& b) {
  GLM4_CHECK(a.shape() == b.shape(), "[add_values] shapes ", shape_str(a.shape()), " and ",
             shape_str(b.shape()));
  Tensor out = Tensor::empty(a.shape());
  const float* pa = a.data();
  const float* pb = b.data();
  float* po = out.data();
  parallel_for(a.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) po[i] = pa[i] + pb[i];
  });
  return out;
}

void add_into(Tensor dst, const Tensor& src) {
  GLM4_CHECK(dst.shape() == src.shape(), "[add_into] shapes ", shape_str(dst.shape()), " and ",
             shape_str(src.shape()));
  float* pd = dst.data();
  const float* ps = src.data();
  parallel_for(dst.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) pd[i] += ps[i];
  });
}

void add_rows(Tensor dst, const Tensor& src, const std::vector<int64_t>& rows) {
  const int64_t width = src.rank() == 2 ? src.dim(1) : 0;
  float* pd = dst.data();
  const float* ps = src.data();
  parallel_for(int64_t(rows.size()), std::max<int64_t>(1, kGrain / std::max<int64_t>(width, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t i = lo; i < hi; ++i) {
                   float* d = pd + rows[size_t(i)] * width;
                   const float* x = ps + i * width;
                   for (int64_t j = 0; j < width; ++j) d[j] += x[j];
                 }
               });
}

void check_rows_within(const char* op, std::span<const int64_t> rows, const Tensor& source) {
  const int64_t n = source.dim(0);
  for (size_t i = 0; i < rows.size(); ++i)
    GLM4_CHECK(rows[i] >= 0 && rows[i] < n, "[", op, "] row ", rows[i], " at ", i,
               " is outside [0, ", n, ") of ", shape_str(source.shape()));
}

bool strictly_increasing(std::span<const int64_t> rows) {
  return std::adjacent_find(rows.begin(), rows.end(), std::greater_equal<int64_t>()) == rows.end();
}

void copy_rows(const float* src, std::span<const int64_t> rows, int64_t width, float* dst) {
  parallel_for(int64_t(rows.size()), std::max<int64_t>(1, 4096 / std::max<int64_t>(width, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t i = lo; i < hi; ++i)
                   std::memcpy(dst + i * width, src + rows[size_t(i)] * width,
                               size_t(width) * sizeof(float));
               });
}

void scale_into(Tensor dst, float s) {
  float* pd = dst.data();
  parallel_for(dst.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) pd[i] *= s;
  });
}

}  // namespace glm4
