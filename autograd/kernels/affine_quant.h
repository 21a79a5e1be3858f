// mlx's affine quantization (quantize, and dequantize bit for bit as mlx computes it) and the
// fp32 / bf16 dequantization of tiles and rows that the quantized kernels are built on.
#pragma once
#include <cstdint>
#include <string_view>

#include "autograd/kernels/quantized_matrix.h"

// What was checked in mlx's source (ml-explore/mlx at 846d176; mlx/backend/cpu/quantized.cpp
// `quantize` and `extract_bits`, mlx/ops.cpp `affine_quantize` / `affine_dequantize`,
// mlx/backend/metal/kernels/quantized.h, and the history of PRs #1061, #1282, #1925):
// - Packing: the CPU quantize ORs code k at bit k*bits of a uint32 (2/4/8 bits) or of an
//   integer written out as 3 (3 and 6 bits) or 5 (5 bits) little-endian bytes; extract_bits and
//   the composed fallback (a uint32 array read as a bit stream) read it back the same way. So
//   every width is one little-endian bit stream per row.
// - Quantize: min, max, scale, edge, q0 and the codes are computed in fp32 and scale/bias are
//   cast to the weight dtype only after the codes (PR #1925, March 2025; before it all of this
//   ran in the weight dtype, and the codes used the rounded scale, so older checkpoints can
//   differ in the last bits; loading them is unaffected).
// - The GPU kernels (Metal, CUDA) differ in edge cases: their max starts at 0 (an all-negative
//   group uses max = 0), `round` is half away from zero, and codes are not clamped at 0. We
//   follow the CPU and the fallback: true max, rint (half to even), clamp to [0, n].
// - Dequantize (the fallback): multiply(code, scale), then add(bias), in the scales' dtype.
namespace glm4 {

// Quantizes w [rows, cols] (stored in `dtype`) per group of `format.group_size` columns exactly
// as mlx's affine quantize does (mlx >= 0.24, PR #1925), all in fp32:
//   n = 2^bits - 1; scale = max((max - min) / n, 1e-7);
//   if |min| > |max| the edge is min, else the edge is max and scale = -scale;
//   q0 = rint(edge / scale); if q0 != 0 { scale = edge / q0; bias = edge } else bias = 0;
//   code = clamp(rint((w - bias) / scale), 0, n)   (with the fp32 scale and bias),
// and only then rounds scale and bias to `dtype` (round to nearest even). Scales may be
// negative. Throws naming `name` on an unsupported format or a group size not dividing cols.
QuantizedStorage quantize_affine(DType dtype, const void* w, int64_t rows, int64_t cols,
                                 QuantFormat format, std::string_view name);

// out[rows, cols] in q.scale_dtype, bit for bit what mlx's dequantize returns: per element
// T(T(scale * code) + bias), each operation in fp32 then rounded to T (no fused multiply-add).
void dequantize_affine(const QuantizedMatrix& q, void* out);

// The kernels' dequantization: dst[i * ld + j] = fma(scale, code, bias) in fp32 (one rounding)
// for rows [row0, row0 + rows) and columns [col0, col0 + cols) of q. col0 must be a multiple of
// the group size, and so must cols be.
void dequantize_tile_f32(const QuantizedMatrix& q, int64_t row0, int64_t rows, int64_t col0,
                         int64_t cols, float* dst, int64_t ld);
// The same values rounded to bf16 (nearest even), for products on bf16 units.
void dequantize_tile_bf16(const QuantizedMatrix& q, int64_t row0, int64_t rows, int64_t col0,
                          int64_t cols, uint16_t* dst, int64_t ld);

// Embedding lookup: out[i, :] = row ids[i] of q dequantized as dequantize_tile_f32 does.
// Throws naming `name` if an id is out of range.
void dequantize_rows_f32(const QuantizedMatrix& q, const int32_t* ids, int64_t count, float* out,
                         std::string_view name);

}  // namespace glm4
