// Frozen weight matrices kept in their stored format (F32 / BF16 / F16, or mlx's affine 2-8 bit
// groups); the GEMM kernels in gemm.h read that format directly, so a bf16 checkpoint costs 2
// bytes a parameter in memory and a 4-bit one about half a byte.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "autograd/kernels/quantized_matrix.h"
#include "base/dtype.h"

namespace glm4 {

// A row-major matrix [rows = out_features, cols = in_features]. It either owns a 64-byte
// aligned buffer or views memory kept alive by `owner` (an mmapped file, say). Copies share the
// buffer and are cheap; the contents never change after construction. A quantized Weight holds
// a QuantizedMatrix instead of dense elements: its products, rows and widening dequantize
// group by group (autograd/kernels/quant_linear.h), never the whole matrix at run time.
class Weight {
 public:
  Weight() = default;

  // Copies `data` [rows, cols], rounding each value once (to nearest even) to `store_as`.
  static Weight from_f32(const float* data, int64_t rows, int64_t cols,
                         DType store_as = DType::F32);
  // Copies `data` [rows, cols], already in `dtype`, into an owned buffer.
  static Weight copy_of(DType dtype, const void* data, int64_t rows, int64_t cols);
  // Zero-copy view of `data`; `owner` is held as long as any copy of the Weight lives.
  // `data` must be aligned to the element size (use copy_of otherwise).
  static Weight view(DType dtype, const void* data, int64_t rows, int64_t cols,
                     std::shared_ptr<const void> owner);
  // Zero-copy view of an affine-quantized matrix whose bytes `owner` keeps alive (the mapped
  // file(s) holding its weight, scales and biases). Checks `q` (check_quantized).
  static Weight quantized_view(const QuantizedMatrix& q, std::shared_ptr<const void> owner);
  // Takes ownership of `q` (what quantize_affine returns); counted in weight_bytes_live.
  static Weight quantized(QuantizedStorage q);

  // The element dtype; for a quantized Weight the dtype of its scales and biases (the
  // original weight's).
  DType dtype() const { return dtype_; }
  bool is_quantized() const { return quantized_; }
  // The affine view (packed codes, scales, biases); throws unless is_quantized().
  const QuantizedMatrix& quant() const;
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t numel() const { return rows_ * cols_; }
  bool empty() const { return numel() == 0; }
  // The dense elements; null for a quantized Weight (use quant()).
  const void* data() const { return data_; }
  // Bytes held: the elements, or the codes, scales and biases.
  size_t bytes() const {
    return quantized_ ? quant_.bytes() : size_t(numel()) * dtype_size(dtype_);
  }
  // True when the buffer belongs to this Weight (and counts in weight_bytes_live).
  bool owns_buffer() const { return owned_; }

  // Row r widened (or dequantized) to fp32: out[cols].
  void row_to_f32(int64_t r, float* out) const;
  // The whole matrix widened to fp32: out[rows * cols]. For tests and fuse only; the kernels
  // never widen a whole matrix.
  void to_f32(float* out) const;

 private:
  DType dtype_ = DType::F32;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  const void* data_ = nullptr;
  bool owned_ = false;
  bool quantized_ = false;
  QuantizedMatrix quant_;             // set when quantized_
  std::shared_ptr<const void> keep_;  // the owned buffer or the external owner
};

// Bytes held by all weight buffers owned by Weights (views are not counted).
size_t weight_bytes_live();

}  // namespace glm4
