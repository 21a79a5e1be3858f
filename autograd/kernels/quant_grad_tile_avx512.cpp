// Replaces dequantizing a row-major tile and calling sgemm on it, whose own packing of that tile
// and of dY and zeroing of dX took a fifth of the input gradient (a QLoRA step's largest part):
// here each dequantized row is copied once into the panels the FMA loop reads, and dY's values
// are broadcast from its rows where they lie.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "autograd/kernels/quant_grad_tile.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "autograd/kernels/quant_kernels.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma,f16c")
#include "autograd/kernels/quant_simd.h"

namespace glm4::quant_detail {
namespace {

constexpr int64_t kStrip = 32;    // output columns of a panel: two vectors
constexpr int64_t kReduce = 256;  // rows of W a panel holds: 32 KB, in L1 beside 6 rows of dY
constexpr int kRowBlock = 6;      // rows of dY (and dX) a micro-kernel call keeps in registers
// Rows of dY run over every panel before the next ones: their 256 values each (128 KB) stay in L2
// across the strips (over 2,048 rows at once the kernel ran 20-25% slower).
constexpr int64_t kChunkRows = 128;

// c[i, 0:columns] (+)= sum_n dy[i, n] panel[n, 0:columns] for i < MR; columns <= 32 (fewer at
// dX's edge).
template <int MR>
void micro(const float* panel, int64_t rows, const float* dy, int64_t ldy, float* c, int64_t ldc,
           int64_t columns, bool load_c) {
  const __mmask16 lanes[2] = {first_lanes(columns), first_lanes(columns - 16)};
  __m512 acc[MR][2];
  for (int i = 0; i < MR; ++i)
    for (int h = 0; h < 2; ++h)
      acc[i][h] =
          load_c ? _mm512_maskz_loadu_ps(lanes[h], c + i * ldc + 16 * h) : _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int64_t n = 0; n < rows; ++n) {
    const __m512 b0 = _mm512_load_ps(panel + n * kStrip);
    const __m512 b1 = _mm512_load_ps(panel + n * kStrip + 16);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 a = _mm512_set1_ps(dy[i * ldy + n]);
      acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int h = 0; h < 2; ++h) _mm512_mask_storeu_ps(c + i * ldc + 16 * h, lanes[h], acc[i][h]);
}

void micro_rows(int64_t mr, const float* panel, int64_t rows, const float* dy, int64_t ldy,
                float* c, int64_t ldc, int64_t columns, bool load_c) {
  switch (mr) {
    case 1:
      return micro<1>(panel, rows, dy, ldy, c, ldc, columns, load_c);
    case 2:
      return micro<2>(panel, rows, dy, ldy, c, ldc, columns, load_c);
    case 3:
      return micro<3>(panel, rows, dy, ldy, c, ldc, columns, load_c);
    case 4:
      return micro<4>(panel, rows, dy, ldy, c, ldc, columns, load_c);
    case 5:
      return micro<5>(panel, rows, dy, ldy, c, ldc, columns, load_c);
    default:
      return micro<kRowBlock>(panel, rows, dy, ldy, c, ldc, columns, load_c);
  }
}

// panels[s][n - n0][0:32] = deq(W)[n, c0 + 32 s : c0 + 32 s + 32] for n in [n0, n0 + rows), zero
// past `width` columns.
void fill_panels(const QuantizedMatrix& W, int64_t n0, int64_t rows, int64_t c0, int64_t width,
                 float* row_buffer, float* panels) {
  const QuantKernels& k = active();
  const int64_t strips = (width + kStrip - 1) / kStrip;
  for (int64_t n = 0; n < rows; ++n) {
    k.dequant_row(W, n0 + n, c0, width, row_buffer);
    for (int64_t s = 0; s < strips; ++s) {
      float* out = panels + (s * rows + n) * kStrip;
      for (int h = 0; h < 2; ++h) {
        const int64_t first = s * kStrip + 16 * h;
        _mm512_store_ps(out + 16 * h,
                        _mm512_maskz_loadu_ps(first_lanes(width - first), row_buffer + first));
      }
    }
  }
}

// `count` floats from a 64-byte boundary inside store (grown as needed).
float* aligned_floats(std::vector<float>& store, int64_t count) {
  if (store.size() < size_t(count + 16)) store.resize(size_t(count + 16));
  const auto address = reinterpret_cast<uintptr_t>(store.data());
  return store.data() + ((64 - address % 64) % 64) / sizeof(float);
}

}  // namespace

void input_grad_tile_avx512(const float* dY, const QuantizedMatrix& W, int64_t m0, int64_t m1,
                            int64_t c0, int64_t c1, float* dX, bool accumulate) {
  const int64_t N = W.rows, K = W.cols, width = c1 - c0;
  const int64_t strips = (width + kStrip - 1) / kStrip;
  thread_local std::vector<float> panel_store, row_buffer;
  float* panels = aligned_floats(panel_store, strips * kReduce * kStrip);
  if (row_buffer.size() < size_t(width)) row_buffer.resize(size_t(width));
  for (int64_t n0 = 0; n0 < N; n0 += kReduce) {
    const int64_t rows = std::min(kReduce, N - n0);
    fill_panels(W, n0, rows, c0, width, row_buffer.data(), panels);
    const bool load_c = accumulate || n0 > 0;
    for (int64_t chunk = m0; chunk < m1; chunk += kChunkRows) {
      const int64_t chunk_end = std::min(m1, chunk + kChunkRows);
      for (int64_t s = 0; s < strips; ++s) {
        const float* panel = panels + s * rows * kStrip;
        for (int64_t m = chunk; m < chunk_end; m += kRowBlock)
          micro_rows(std::min<int64_t>(kRowBlock, chunk_end - m), panel, rows, dY + m * N + n0, N,
                     dX + m * K + c0 + s * kStrip, K, std::min(kStrip, width - s * kStrip), load_c);
      }
    }
  }
}

}  // namespace glm4::quant_detail

#pragma GCC pop_options
