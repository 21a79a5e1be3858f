// The MLX affine quantized weight format as the kernels see it: a read-only view of packed codes
// with per-group scales and biases, an owning buffer for what glm4 quantizes itself, and checks.
#pragma once
#include <bit>
#include <cstdint>
#include <string_view>
#include <vector>

#include "base/dtype.h"

namespace glm4 {

static_assert(std::endian::native == std::endian::little,
              "the packed codes are read as a little-endian bit stream");

// mlx's quantization parameters ("quantization": {"group_size": 64, "bits": 4, "mode": "affine"}).
struct QuantFormat {
  int bits = 4;         // 2, 3, 4, 5, 6 or 8
  int group_size = 64;  // 32, 64 or 128
  bool operator==(const QuantFormat&) const = default;
};

bool quant_bits_supported(int bits);
bool quant_group_supported(int group_size);
// Throws naming `what` unless bits and group size are ones mlx supports.
void check_quant_format(QuantFormat format, std::string_view what);

// A frozen matrix [rows = out_features, cols = in_features] in mlx's affine format:
// element (r, c) = scale[r, c / group] * code(r, c) + bias[r, c / group].
// Each row's codes form one little-endian bit stream: code c occupies bits [c*bits, (c+1)*bits)
// of the row's cols*bits/8 bytes. For 2/4/8 bits that is "code c in uint32 word c*bits/32 from
// its low bits"; for 3/5/6 bits it is 8 codes in 3 bytes, 8 in 5 bytes and 4 in 3 bytes. A
// file stores the rows as uint32 [rows, cols*bits/32]; on a little-endian host those are the
// same bytes. A view: the memory belongs to someone else (a file mapping, QuantizedStorage, a
// Weight), and need not be aligned.
struct QuantizedMatrix {
  const uint8_t* packed = nullptr;  // [rows, cols * bits / 8]
  const void* scales = nullptr;     // [rows, cols / group_size] in scale_dtype
  const void* biases = nullptr;     // [rows, cols / group_size] in scale_dtype
  DType scale_dtype = DType::F32;   // the original weight's dtype
  int bits = 4;
  int group_size = 64;
  int64_t rows = 0;
  int64_t cols = 0;

  QuantFormat format() const { return {bits, group_size}; }
  int64_t row_bytes() const { return cols * bits / 8; }
  int64_t groups() const { return group_size > 0 ? cols / group_size : 0; }
  const uint8_t* row(int64_t r) const { return packed + r * row_bytes(); }
  // Bytes read by one pass over the matrix: codes, scales and biases.
  size_t bytes() const {
    return size_t(rows) * size_t(row_bytes() + 2 * groups() * int64_t(dtype_size(scale_dtype)));
  }
  float scale(int64_t r, int64_t g) const { return widen(scales, r * groups() + g); }
  float bias(int64_t r, int64_t g) const { return widen(biases, r * groups() + g); }

 private:
  float widen(const void* p, int64_t i) const;
};

// Throws naming `name` unless `q` is usable: supported bits and group size, the group size
// dividing cols, non-negative sizes and non-null buffers.
void check_quantized(const QuantizedMatrix& q, std::string_view name);

// Owned codes, scales and biases (what quantize_affine returns); view() points into it.
struct QuantizedStorage {
  std::vector<uint32_t> packed;  // [rows, cols * bits / 32] words
  std::vector<uint8_t> scales;   // [rows, cols / group_size] values of scale_dtype, raw bytes
  std::vector<uint8_t> biases;
  DType scale_dtype = DType::F32;
  int bits = 4;
  int group_size = 64;
  int64_t rows = 0;
  int64_t cols = 0;

  QuantizedMatrix view() const;
};

}  // namespace glm4
