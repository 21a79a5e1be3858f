// Checks of the affine format's parameters and views.
#include "autograd/kernels/quantized_matrix.h"

#include <cstring>

#include "base/check.h"

namespace glm4 {

bool quant_bits_supported(int bits) {
  return bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8;
}

bool quant_group_supported(int group_size) {
  return group_size == 32 || group_size == 64 || group_size == 128;
}

void check_quant_format(QuantFormat format, std::string_view what) {
  GLM4_CHECK(quant_bits_supported(format.bits), "[quantized] ", what, ": bits ", format.bits,
             " not supported (2, 3, 4, 5, 6 or 8)");
  GLM4_CHECK(quant_group_supported(format.group_size), "[quantized] ", what, ": group_size ",
             format.group_size, " not supported (32, 64 or 128)");
}

float QuantizedMatrix::widen(const void* p, int64_t i) const {
  const auto* bytes = static_cast<const uint8_t*>(p) + i * int64_t(dtype_size(scale_dtype));
  if (scale_dtype == DType::F32) {
    float f;
    std::memcpy(&f, bytes, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, bytes, 2);
  return scale_dtype == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

void check_quantized(const QuantizedMatrix& q, std::string_view name) {
  check_quant_format(q.format(), name);
  GLM4_CHECK(q.rows >= 0 && q.cols >= 0, "[quantized] ", name, ": negative shape [", q.rows, ", ",
             q.cols, "]");
  GLM4_CHECK(q.cols % q.group_size == 0, "[quantized] ", name, ": group_size ", q.group_size,
             " does not divide in_features ", q.cols);
  const bool empty = q.rows == 0 || q.cols == 0;
  GLM4_CHECK(empty || q.packed != nullptr, "[quantized] ", name, ": weight (packed codes) is null");
  GLM4_CHECK(empty || q.scales != nullptr, "[quantized] ", name, ": scales are null");
  GLM4_CHECK(empty || q.biases != nullptr, "[quantized] ", name, ": biases are null");
}

QuantizedMatrix QuantizedStorage::view() const {
  QuantizedMatrix q;
  q.packed = reinterpret_cast<const uint8_t*>(packed.data());
  q.scales = scales.data();
  q.biases = biases.data();
  q.scale_dtype = scale_dtype;
  q.bits = bits;
  q.group_size = group_size;
  q.rows = rows;
  q.cols = cols;
  return q;
}

}  // namespace glm4
