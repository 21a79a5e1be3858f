// Widening of weight elements to fp32, vectorised with the widening loads of simd.h.
#include "autograd/kernels/convert.h"

#include <cstring>

#include "autograd/kernels/simd.h"
#include "base/parallel.h"

namespace glm4 {

void convert_to_f32(DType dtype, const void* src, int64_t n, float* dst) {
  if (n <= 0) return;
  if (dtype == DType::F32) {
    std::memcpy(dst, src, size_t(n) * sizeof(float));
    return;
  }
  const auto* h = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + simd::kLanes <= n; i += simd::kLanes) simd::store(dst + i, simd::load(h + i, dtype));
  for (; i < n; ++i) dst[i] = simd::widen(h + i, dtype);
}

void convert_to_f32_parallel(DType dtype, const void* src, int64_t n, float* dst) {
  constexpr int64_t kGrain = int64_t(1) << 16;  // elements a task widens
  parallel_for(n, kGrain, [&](int64_t lo, int64_t hi) {
    convert_to_f32(dtype, element_ptr(dtype, src, lo), hi - lo, dst + lo);
  });
}

void convert_block_to_f32(DType dtype, const void* src, int64_t ld, int64_t rows, int64_t cols,
                          float* dst) {
  for (int64_t r = 0; r < rows; ++r)
    convert_to_f32(dtype, element_ptr(dtype, src, r * ld), cols, dst + r * cols);
}

}  // namespace glm4
