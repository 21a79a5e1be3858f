// ggml tensor data from fp32 and back: plain floats, halves and the two 32-element block quants.
#include "export/ggml_quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/dtype.h"

namespace glm4 {
namespace {

constexpr int kBlock = 32;

void put_u16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v & 0xFF);
  p[1] = uint8_t(v >> 8);
}

uint16_t get_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }

void check_blocks(GgmlType t, int64_t n) {
  GLM4_CHECK(n >= 0 && n % ggml_block_size(t) == 0, ggml_type_name(t), ": ", n,
             " values are not a whole number of ", ggml_block_size(t), "-value blocks");
}

}  // namespace

size_t ggml_row_bytes(GgmlType t, int64_t n) {
  check_blocks(t, n);
  return size_t(n / ggml_block_size(t)) * ggml_block_bytes(t);
}

void quantize_block_q8_0(const float* x, uint8_t* block) {
  float amax = 0.0f;
  for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_u16(block, f32_to_f16(d));
  for (int j = 0; j < kBlock; ++j) block[2 + j] = uint8_t(int8_t(std::round(x[j] * id)));
}

void quantize_block_q4_0(const float* x, uint8_t* block) {
  float amax = 0.0f, max = 0.0f;  // the value of largest magnitude, the first one on ties
  for (int j = 0; j < kBlock; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_u16(block, f32_to_f16(d));
  for (int j = 0; j < kBlock / 2; ++j) {
    const float x0 = x[j] * id;
    const float x1 = x[kBlock / 2 + j] * id;
    // x * id + 8.5 lies in [0.5, 16.5]: the int8 conversion truncates, as ggml's does.
    const uint8_t q0 = uint8_t(std::min<int>(15, int8_t(x0 + 8.5f)));
    const uint8_t q1 = uint8_t(std::min<int>(15, int8_t(x1 + 8.5f)));
    block[2 + j] = uint8_t(q0 | (q1 << 4));
  }
}

void ggml_encode(GgmlType t, const float* x, int64_t n, std::vector<uint8_t>& out) {
  const size_t start = out.size();
  out.resize(start + ggml_row_bytes(t, n));
  uint8_t* p = out.data() + start;
  switch (t) {
    case GgmlType::F32:
      std::memcpy(p, x, size_t(n) * 4);
      return;
    case GgmlType::F16:
      for (int64_t k = 0; k < n; ++k) put_u16(p + 2 * k, f32_to_f16(x[k]));
      return;
    case GgmlType::BF16:
      for (int64_t k = 0; k < n; ++k) put_u16(p + 2 * k, f32_to_bf16(x[k]));
      return;
    case GgmlType::Q8_0:
      for (int64_t b = 0; b < n / kBlock; ++b) quantize_block_q8_0(x + b * kBlock, p + b * 34);
      return;
    case GgmlType::Q4_0:
      for (int64_t b = 0; b < n / kBlock; ++b) quantize_block_q4_0(x + b * kBlock, p + b * 18);
      return;
  }
  fail("ggml_encode: unknown type ", uint32_t(t));
}

void ggml_decode(GgmlType t, const uint8_t* data, int64_t n, float* out) {
  check_blocks(t, n);
  if (n == 0) return;  // out may be null then (an empty vector's data()): memcpy must not see it
  switch (t) {
    case GgmlType::F32:
      std::memcpy(out, data, size_t(n) * 4);
      return;
    case GgmlType::F16:
      for (int64_t k = 0; k < n; ++k) out[k] = f16_to_f32(get_u16(data + 2 * k));
      return;
    case GgmlType::BF16:
      for (int64_t k = 0; k < n; ++k) out[k] = bf16_to_f32(get_u16(data + 2 * k));
      return;
    case GgmlType::Q8_0:
      for (int64_t b = 0; b < n / kBlock; ++b) {
        const uint8_t* blk = data + b * 34;
        const float d = f16_to_f32(get_u16(blk));
        for (int j = 0; j < kBlock; ++j) out[b * kBlock + j] = float(int8_t(blk[2 + j])) * d;
      }
      return;
    case GgmlType::Q4_0:
      for (int64_t b = 0; b < n / kBlock; ++b) {
        const uint8_t* blk = data + b * 18;
        const float d = f16_to_f32(get_u16(blk));
        for (int j = 0; j < kBlock / 2; ++j) {
          out[b * kBlock + j] = float((blk[2 + j] & 0x0F) - 8) * d;
          out[b * kBlock + kBlock / 2 + j] = float((blk[2 + j] >> 4) - 8) * d;
        }
      }
      return;
  }
  fail("ggml_decode: unknown type ", uint32_t(t));
}

}  // namespace glm4
