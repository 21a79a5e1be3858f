// The portable quantized kernels: unpack a group's codes, dequantize with fma, dot in order.
// Correct for every width; the fallback where neither AVX2 nor AVX-512 is present.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "autograd/kernels/affine_pack.h"
#include "autograd/kernels/convert.h"
#include "autograd/kernels/quant_kernels.h"

namespace glm4::quant_detail {

namespace {

constexpr int64_t kParamBlock = 16;  // groups whose scales and biases are widened at once
constexpr int64_t kLanes = 16;       // partial sums per output (divides every group size)

void prepare_x(int, const float* X, int64_t M, int64_t K, float* xp) {
  std::memcpy(xp, X, size_t(M * K) * sizeof(float));
}

void forward_rows(const QuantizedMatrix& W, const float* xp, int64_t M, int64_t n0, int64_t n1,
                  float* Y, int64_t ldy, bool accumulate) {
  const int64_t K = W.cols, group = W.group_size, groups = W.groups();
  float scales[kParamBlock], biases[kParamBlock], w[128];
  uint8_t codes[128];
  for (int64_t n = n0; n < n1; ++n) {
    // kLanes interleaved partial sums (like a vector unit's lanes): a K-term sequential sum
    // would have several times the rounding error of the fp32 GEMM.
    float sum[kDecodeMaxM][kLanes] = {};
    for (int64_t gb = 0; gb < groups; gb += kParamBlock) {
      const int64_t count = std::min(kParamBlock, groups - gb);
      load_group_params(W, W.scales, n, gb, count, scales);
      load_group_params(W, W.biases, n, gb, count, biases);
      for (int64_t g = 0; g < count; ++g) {
        const int64_t c = (gb + g) * group;
        unpack_codes(W.bits, W.row(n), c, group, codes);
        for (int64_t j = 0; j < group; ++j) w[j] = std::fma(scales[g], float(codes[j]), biases[g]);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t j = 0; j < group; j += kLanes)
            for (int64_t l = 0; l < kLanes; ++l) sum[m][l] += w[j + l] * xp[m * K + c + j + l];
      }
    }
    for (int64_t m = 0; m < M; ++m) {
      float total = 0.0f;
      for (int64_t l = 0; l < kLanes; ++l) total += sum[m][l];
      float& y = Y[m * ldy + n];
      y = accumulate ? y + total : total;
    }
  }
}

void dequant_row(const QuantizedMatrix& W, int64_t r, int64_t c0, int64_t count, float* out) {
  const int64_t group = W.group_size;
  float scales[kParamBlock], biases[kParamBlock];
  uint8_t codes[128];
  for (int64_t c = 0; c < count; c += group * kParamBlock) {
    const int64_t g0 = (c0 + c) / group, ng = std::min(kParamBlock, (count - c) / group);
    load_group_params(W, W.scales, r, g0, ng, scales);
    load_group_params(W, W.biases, r, g0, ng, biases);
    for (int64_t g = 0; g < ng; ++g) {
      unpack_codes(W.bits, W.row(r), (g0 + g) * group, group, codes);
      float* o = out + c + g * group;
      for (int64_t j = 0; j < group; ++j) o[j] = std::fma(scales[g], float(codes[j]), biases[g]);
    }
  }
}

}  // namespace

void load_group_params(const QuantizedMatrix& W, const void* params, int64_t r, int64_t g0,
                       int64_t count, float* out) {
  convert_to_f32(W.scale_dtype, element_ptr(W.scale_dtype, params, r * W.groups() + g0), count,
                 out);
}

const QuantKernels& scalar_kernels() {
  static const QuantKernels k{"scalar", prepare_x, forward_rows, dequant_row};
  return k;
}

}  // namespace glm4::quant_detail
