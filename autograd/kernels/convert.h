// Vectorised widening of stored weight elements (F32 / BF16 / F16) to fp32. Exact: every bf16
// and f16 value, subnormals included, has one fp32 value.
#pragma once
#include <cstdint>

#include "base/dtype.h"

namespace glm4 {

// dst[i] = widen(src[i]) for i < n; src holds n elements of `dtype`.
void convert_to_f32(DType dtype, const void* src, int64_t n, float* dst);

// The same over parallel ranges, for buffers of many MB (a KV cache read as fp32).
void convert_to_f32_parallel(DType dtype, const void* src, int64_t n, float* dst);

// Widens the block src[r, c] (r < rows, c < cols, row stride `ld` elements) into dst[rows, cols]
// (dense, row stride cols).
void convert_block_to_f32(DType dtype, const void* src, int64_t ld, int64_t rows, int64_t cols,
                          float* dst);

// Pointer to element `i` of a buffer of `dtype`.
inline const void* element_ptr(DType dtype, const void* base, int64_t i) {
  return static_cast<const char*>(base) + i * int64_t(dtype_size(dtype));
}

}  // namespace glm4
