// Quantizing a frozen Weight of any stored form to mlx's affine format, a block of rows at a
// time, so only that block is ever widened to fp32.
#pragma once
#include <cstdint>
#include <string_view>

#include "autograd/weight.h"

namespace glm4 {

// Rows [r0, r1) of `w`, their values first rounded to `dtype` (the dtype the scales and biases
// get: mlx quantizes a weight of that dtype), quantized with `format` exactly as
// quantize_affine does. A quantized `w` is dequantized first (re-quantizing is lossy). Throws
// naming `name` when the group size does not divide w's columns.
QuantizedStorage quantize_rows(const Weight& w, int64_t r0, int64_t r1, QuantFormat format,
                               DType dtype, std::string_view name);

// The whole matrix, quantized block by block into one owned quantized Weight.
Weight quantize_weight(const Weight& w, QuantFormat format, DType dtype, std::string_view name);

// w [grid.rows, grid.cols] (fp32) on the grid of `grid`: its scales and biases kept, each code
// re-rounded as quantize_affine rounds it, clamp(rint((w - bias) / scale), 0, 2^bits - 1). A
// matrix dequantized from `grid` comes back bit for bit (re-quantizing afresh would move it).
Weight requantize_on_grid(const QuantizedMatrix& grid, const float* w);

}  // namespace glm4
