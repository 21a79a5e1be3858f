// Packing of mlx affine codes: each row's codes as one little-endian bit stream (code c at bits
// [c*bits, (c+1)*bits)), the layout of quantized_matrix.h, for any of the supported widths.
#pragma once
#include <cstdint>

namespace glm4 {

// packed[0 .. count*bits/8) = the codes as a bit stream; count*bits must be a multiple of 8 and
// every code below 2^bits.
void pack_codes(int bits, const uint8_t* codes, int64_t count, uint8_t* packed);

// codes[i] = code (first + i) of the stream at `packed`, for i < count; first*bits and
// count*bits must be multiples of 8 (any multiple of 8 codes is, for every width).
void unpack_codes(int bits, const uint8_t* packed, int64_t first, int64_t count, uint8_t* codes);

}  // namespace glm4
