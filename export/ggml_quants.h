// Encoding fp32 values as ggml tensor data (f32, f16, bf16, q8_0, q4_0) and decoding it back.
// The q8_0/q4_0 encoders follow ggml's reference quantizers bit for bit (block of 32, fp16
// scale): q8_0 d = amax / 127, q = roundf(x / d); q4_0 d = (signed value of largest magnitude)
// / -8, q = min(15, trunc(x / d + 8.5)), low nibbles hold elements 0..15, high ones 16..31.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "export/gguf_format.h"

namespace glm4 {

// Bytes that n values of type t take; n must be a multiple of the type's block size.
size_t ggml_row_bytes(GgmlType t, int64_t n);

// n values -> ggml bytes appended to `out`. Throws when n is not a multiple of the block size.
void ggml_encode(GgmlType t, const float* x, int64_t n, std::vector<uint8_t>& out);
// ggml bytes of n values -> n floats (f16/bf16 widen exactly; quants give q * fp16(d)).
void ggml_decode(GgmlType t, const uint8_t* data, int64_t n, float* out);

// One block of 32 values: 2 bytes of fp16 scale then the quants.
void quantize_block_q8_0(const float* x, uint8_t* block);  // 34 bytes
void quantize_block_q4_0(const float* x, uint8_t* block);  // 18 bytes

}  // namespace glm4
