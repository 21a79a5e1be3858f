// Block-wise quantization of Weights: widen a block of rows, round to the scales' dtype,
// quantize_affine, append.
#include "autograd/weight_quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "autograd/kernels/affine_pack.h"
#include "autograd/kernels/affine_quant.h"
#include "base/check.h"
#include "base/parallel.h"

namespace glm4 {

namespace {
constexpr int64_t kBlockElems = 1 << 22;  // about 16 MB of fp32 rows per block

int64_t block_rows(int64_t cols) {
  return std::max<int64_t>(1, kBlockElems / std::max<int64_t>(1, cols));
}
}  // namespace

QuantizedStorage quantize_rows(const Weight& w, int64_t r0, int64_t r1, QuantFormat format,
                               DType dtype, std::string_view name) {
  GLM4_CHECK(0 <= r0 && r0 <= r1 && r1 <= w.rows(), "[quantize] ", name, ": rows [", r0, ", ", r1,
             ") outside [0, ", w.rows(), ")");
  const int64_t rows = r1 - r0, cols = w.cols();
  std::vector<float> f32(size_t(rows * cols));
  parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, cols)),
               [&](int64_t a, int64_t b) {
                 for (int64_t r = a; r < b; ++r) w.row_to_f32(r0 + r, f32.data() + r * cols);
               });
  if (dtype == DType::F32) return quantize_affine(DType::F32, f32.data(), rows, cols, format, name);
  std::vector<uint16_t> rounded(f32.size());
  for (size_t i = 0; i < f32.size(); ++i)
    rounded[i] = dtype == DType::BF16 ? f32_to_bf16(f32[i]) : f32_to_f16(f32[i]);
  return quantize_affine(dtype, rounded.data(), rows, cols, format, name);
}

Weight quantize_weight(const Weight& w, QuantFormat format, DType dtype, std::string_view name) {
  QuantizedStorage all;
  const int64_t step = block_rows(w.cols());
  for (int64_t r0 = 0; r0 < w.rows(); r0 += step) {
    QuantizedStorage part =
        quantize_rows(w, r0, std::min(w.rows(), r0 + step), format, dtype, name);
    if (r0 == 0) {
      all = std::move(part);
      continue;
    }
    all.packed.insert(all.packed.end(), part.packed.begin(), part.packed.end());
    all.scales.insert(all.scales.end(), part.scales.begin(), part.scales.end());
    all.biases.insert(all.biases.end(), part.biases.begin(), part.biases.end());
    all.rows += part.rows;
  }
  if (w.rows() == 0) all = quantize_affine(dtype, nullptr, 0, w.cols(), format, name);
  return Weight::quantized(std::move(all));
}

Weight requantize_on_grid(const QuantizedMatrix& grid, const float* w) {
  check_quantized(grid, "requantize_on_grid");
  QuantizedStorage out;
  out.scale_dtype = grid.scale_dtype;
  out.bits = grid.bits;
  out.group_size = grid.group_size;
  out.rows = grid.rows;
  out.cols = grid.cols;
  const int64_t groups = grid.groups(), row_bytes = grid.row_bytes();
  const size_t param_bytes = size_t(grid.rows * groups) * dtype_size(grid.scale_dtype);
  out.scales.assign(static_cast<const uint8_t*>(grid.scales),
                    static_cast<const uint8_t*>(grid.scales) + param_bytes);
  out.biases.assign(static_cast<const uint8_t*>(grid.biases),
                    static_cast<const uint8_t*>(grid.biases) + param_bytes);
  out.packed.assign(size_t(grid.rows * row_bytes / 4), 0u);
  const float top = float((1 << grid.bits) - 1);
  parallel_for(grid.rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, grid.cols)),
               [&](int64_t r0, int64_t r1) {
                 std::vector<uint8_t> codes(size_t(grid.cols));
                 for (int64_t r = r0; r < r1; ++r) {
                   for (int64_t c = 0; c < grid.cols; ++c) {
                     const int64_t g = c / grid.group_size;
                     const float q = std::nearbyint((w[r * grid.cols + c] - grid.bias(r, g)) /
                                                    grid.scale(r, g));
                     codes[size_t(c)] = uint8_t(std::clamp(q, 0.0f, top));
                   }
                   pack_codes(grid.bits, codes.data(), grid.cols,
                              reinterpret_cast<uint8_t*>(out.packed.data()) + r * row_bytes);
                 }
               });
  return Weight::quantized(std::move(out));
}

}  // namespace glm4
