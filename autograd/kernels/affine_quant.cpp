// Quantize and dequantize in mlx's affine format (see affine_quant.h for the exact rules).
#include "autograd/kernels/affine_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "autograd/kernels/affine_pack.h"
#include "autograd/kernels/convert.h"
#include "autograd/kernels/quant_kernels.h"
#include "base/check.h"
#include "base/parallel.h"

namespace glm4 {

namespace {

constexpr int kMaxGroup = 128;

void store_as(DType dtype, float v, uint8_t* base, int64_t i) {
  if (dtype == DType::F32) {
    std::memcpy(base + 4 * i, &v, 4);
    return;
  }
  const uint16_t h = dtype == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
  std::memcpy(base + 2 * i, &h, 2);
}

// One group: codes[group] and the fp32 scale and bias they were computed with.
void quantize_group(const float* w, int group, int bits, uint8_t* codes, float* scale_out,
                    float* bias_out) {
  const float n_bins = float((1 << bits) - 1);
  const float eps = 1e-7f;
  float w_min = std::numeric_limits<float>::infinity();
  float w_max = -w_min;
  for (int j = 0; j < group; ++j) {
    w_max = std::max(w_max, w[j]);
    w_min = std::min(w_min, w[j]);
  }
  const bool min_is_edge = std::fabs(w_min) > std::fabs(w_max);
  float scale = std::max((w_max - w_min) / n_bins, eps);
  if (!min_is_edge) scale = -scale;
  const float edge = min_is_edge ? w_min : w_max;
  const float q0 = std::rint(edge / scale);
  float bias = 0.0f;
  if (q0 != 0.0f) {
    scale = edge / q0;
    bias = edge;
  }
  for (int j = 0; j < group; ++j) {
    const float q = std::rint((w[j] - bias) / scale);
    codes[j] = uint8_t(std::min(std::max(q, 0.0f), n_bins));
  }
  *scale_out = scale;
  *bias_out = bias;
}

// Scale and bias of each group in [g0, g0 + count) of row r, widened to fp32.
void group_params(const QuantizedMatrix& q, int64_t r, int64_t g0, int64_t count, float* scales,
                  float* biases) {
  const int64_t offset = r * q.groups() + g0;
  convert_to_f32(q.scale_dtype, element_ptr(q.scale_dtype, q.scales, offset), count, scales);
  convert_to_f32(q.scale_dtype, element_ptr(q.scale_dtype, q.biases, offset), count, biases);
}

void check_tile(const QuantizedMatrix& q, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                const char* op) {
  check_quantized(q, op);
  GLM4_CHECK(row0 >= 0 && rows >= 0 && row0 + rows <= q.rows && col0 >= 0 && cols >= 0 &&
                 col0 + cols <= q.cols && col0 % q.group_size == 0 && cols % q.group_size == 0,
             "[", op, "] tile rows [", row0, ", ", row0 + rows, ") cols [", col0, ", ", col0 + cols,
             ") outside [", q.rows, ", ", q.cols, "] or not aligned to group ", q.group_size);
}

// out = T(T(scale * code) + bias) per element, T = DT, with the rounding inlined per dtype.
template <DType DT, typename Out>
void dequantize_like_mlx(const QuantizedMatrix& q, Out* out) {
  const int64_t group = q.group_size, groups = q.groups();
  auto round = [](float v) {
    if constexpr (DT == DType::BF16)
      return bf16_to_f32(f32_to_bf16(v));
    else if constexpr (DT == DType::F16)
      return f16_to_f32(f32_to_f16(v));
    else
      return v;
  };
  parallel_for(q.rows, 16, [&](int64_t r0, int64_t r1) {
    std::vector<float> scales(static_cast<size_t>(groups)), biases(static_cast<size_t>(groups));
    uint8_t codes[kMaxGroup];
    for (int64_t r = r0; r < r1; ++r) {
      group_params(q, r, 0, groups, scales.data(), biases.data());
      for (int64_t g = 0; g < groups; ++g) {
        unpack_codes(q.bits, q.row(r), g * group, group, codes);
        const float s = scales[size_t(g)], b = biases[size_t(g)];
        Out* o = out + r * q.cols + g * group;
        for (int64_t j = 0; j < group; ++j) {
          const float v = round(round(s * float(codes[j])) + b);
          if constexpr (DT == DType::F32)
            o[j] = v;
          else if constexpr (DT == DType::BF16)
            o[j] = f32_to_bf16(v);
          else
            o[j] = f32_to_f16(v);
        }
      }
    }
  });
}

}  // namespace

QuantizedStorage quantize_affine(DType dtype, const void* w, int64_t rows, int64_t cols,
                                 QuantFormat format, std::string_view name) {
  check_quant_format(format, name);
  GLM4_CHECK(rows >= 0 && cols >= 0, "[quantize] ", name, ": negative shape [", rows, ", ", cols,
             "]");
  GLM4_CHECK(cols % format.group_size == 0, "[quantize] ", name, ": group_size ", format.group_size,
             " does not divide in_features ", cols, " (weight [", rows, ", ", cols, "])");
  GLM4_CHECK(w != nullptr || rows * cols == 0, "[quantize] ", name, ": weight is null");
  QuantizedStorage out;
  out.scale_dtype = dtype;
  out.bits = format.bits;
  out.group_size = format.group_size;
  out.rows = rows;
  out.cols = cols;
  const int64_t groups = cols / format.group_size;
  const int64_t row_words = cols * format.bits / 32;
  out.packed.assign(size_t(rows * row_words), 0u);
  out.scales.assign(size_t(rows * groups) * dtype_size(dtype), 0);
  out.biases.assign(out.scales.size(), 0);
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, cols));
  parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(cols));
    std::vector<uint8_t> codes(static_cast<size_t>(cols));
    for (int64_t r = r0; r < r1; ++r) {
      convert_to_f32(dtype, element_ptr(dtype, w, r * cols), cols, row.data());
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t c = g * format.group_size;
        float scale, bias;
        quantize_group(row.data() + c, format.group_size, format.bits, codes.data() + c, &scale,
                       &bias);
        store_as(dtype, scale, out.scales.data(), r * groups + g);
        store_as(dtype, bias, out.biases.data(), r * groups + g);
      }
      pack_codes(format.bits, codes.data(), cols,
                 reinterpret_cast<uint8_t*>(out.packed.data() + r * row_words));
    }
  });
  return out;
}

void dequantize_affine(const QuantizedMatrix& q, void* out) {
  check_quantized(q, "dequantize");
  switch (q.scale_dtype) {
    case DType::F32:
      return dequantize_like_mlx<DType::F32>(q, static_cast<float*>(out));
    case DType::BF16:
      return dequantize_like_mlx<DType::BF16>(q, static_cast<uint16_t*>(out));
    case DType::F16:
      return dequantize_like_mlx<DType::F16>(q, static_cast<uint16_t*>(out));
  }
}

void dequantize_tile_f32(const QuantizedMatrix& q, int64_t row0, int64_t rows, int64_t col0,
                         int64_t cols, float* dst, int64_t ld) {
  check_tile(q, row0, rows, col0, cols, "dequantize_tile_f32");
  const quant_detail::QuantKernels& k = quant_detail::active();
  for (int64_t i = 0; i < rows; ++i) k.dequant_row(q, row0 + i, col0, cols, dst + i * ld);
}

void dequantize_tile_bf16(const QuantizedMatrix& q, int64_t row0, int64_t rows, int64_t col0,
                          int64_t cols, uint16_t* dst, int64_t ld) {
  check_tile(q, row0, rows, col0, cols, "dequantize_tile_bf16");
  const quant_detail::QuantKernels& k = quant_detail::active();
  thread_local std::vector<float> row;
  if (row.size() < size_t(cols)) row.resize(size_t(cols));
  for (int64_t i = 0; i < rows; ++i) {
    k.dequant_row(q, row0 + i, col0, cols, row.data());
    for (int64_t j = 0; j < cols; ++j) dst[i * ld + j] = f32_to_bf16(row[size_t(j)]);
  }
}

void dequantize_rows_f32(const QuantizedMatrix& q, const int32_t* ids, int64_t count, float* out,
                         std::string_view name) {
  check_quantized(q, name);
  for (int64_t i = 0; i < count; ++i)
    GLM4_CHECK(ids[i] >= 0 && ids[i] < q.rows, "[embedding] ", name, ": id ", ids[i],
               " at position ", i, " outside the vocabulary of ", q.rows);
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, q.cols));
  parallel_for(count, grain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      quant_detail::active().dequant_row(q, ids[i], 0, q.cols, out + i * q.cols);
  });
}

}  // namespace glm4
