#include "autograd/kernels/quant_gemm_int8.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "autograd/kernels/quant_gemm_int8_avx2.h"
#include "autograd/kernels/quant_kernels.h"
#include "autograd/kernels/transpose16.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

// Everything here runs only where int8_supported() said yes.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c")
#include "autograd/kernels/quant_gemm_int8_tiles.h"
#include "autograd/kernels/quant_simd.h"

namespace glm4::quant_detail {
namespace {

using kernels::transpose16;

constexpr int kRowBlock = 6;  // rows of X a micro-kernel call keeps in registers

// 64 bytes of row r's codes from byte b, zero past `valid` bytes or W's last row.
inline __m512i code_bytes(const QuantizedMatrix& W, int64_t r, int64_t b, int64_t valid) {
  return r < W.rows ? load_codes(W.row(r) + b, valid) : _mm512_setzero_si512();
}

// Stores the transposed dword columns v[j] of 16 rows (rows half * 16 onwards) as the tile's k4
// entries first + j * stride_j (within 128-bit lanes: see fill_tile).
inline void store_columns(const __m512i (&v)[16], uint8_t* codes, int half, const int (&k4)[16]) {
  for (int j = 0; j < 16; ++j) _mm512_store_si512(codes + k4[j] * kTileRows * 4 + half * 64, v[j]);
}

void fill_tile(const QuantizedMatrix& W, int64_t n, int64_t k0, int64_t width, Tile& tile) {
  // A step reads 64 bytes of each row: 64 columns at 8 bits, 128 at 4 bits. At 4 bits byte p
  // holds columns 2p (low nibble) and 2p + 1; interleaving the nibbles within 128-bit lanes puts
  // columns 32L..32L+15 in lane L of the first vector and 32L+16..32L+31 in the second, so
  // dword 4L + t of them is k4 entry 8L + t, resp. 8L + 4 + t.
  static constexpr int kIdentity[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  static constexpr int kLow[16] = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
  static constexpr int kHigh[16] = {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31};
  const int64_t step_cols = W.bits == 4 ? 128 : 64;
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  for (int64_t c = 0; c < width; c += step_cols) {
    const int64_t valid = (std::min(step_cols, width - c)) * W.bits / 8;
    const int64_t first = c / 4;
    for (int half = 0; half < 2; ++half) {
      __m512i v[16];
      for (int i = 0; i < 16; ++i)
        v[i] = code_bytes(W, n + half * 16 + i, (k0 + c) * W.bits / 8, valid);
      if (W.bits == 8) {
        transpose16(v);
        int k4[16];
        for (int j = 0; j < 16; ++j) k4[j] = int(first) + kIdentity[j];
        store_columns(v, tile.codes, half, k4);
        continue;
      }
      // Low then high halves in two passes over the same 16 rows (L1 hits): one pass's 16
      // vectors fit the registers, both would spill.
      for (int part = 0; part < 2; ++part) {
        for (int i = 0; i < 16; ++i) {
          if (part == 1) v[i] = code_bytes(W, n + half * 16 + i, (k0 + c) * W.bits / 8, valid);
          const __m512i low = _mm512_and_si512(v[i], nibble);
          const __m512i high = _mm512_and_si512(_mm512_srli_epi16(v[i], 4), nibble);
          v[i] = part == 0 ? _mm512_unpacklo_epi8(low, high) : _mm512_unpackhi_epi8(low, high);
        }
        transpose16(v);
        int k4[16];
        for (int j = 0; j < 16; ++j) k4[j] = int(first) + (part == 0 ? kLow[j] : kHigh[j]);
        store_columns(v, tile.codes, half, k4);
      }
    }
  }
  // Scales and biases: a row's (up to 16) groups widened in one load, transposed to [group][row].
  const int64_t gs = W.group_size, groups = width / gs, g0 = k0 / gs, all_groups = W.groups();
  const std::pair<const void*, float*> params_to_tile[] = {{W.scales, tile.scales},
                                                           {W.biases, tile.biases}};
  for (const auto& [params, out] : params_to_tile) {
    for (int half = 0; half < 2; ++half) {
      __m512i v[16];
      for (int i = 0; i < 16; ++i) {
        const int64_t r = n + half * 16 + i;
        v[i] = r < W.rows
                   ? _mm512_castps_si512(widen_params16(W, params, r, g0, groups, all_groups))
                   : _mm512_setzero_si512();
      }
      transpose16(v);
      for (int64_t g = 0; g < groups; ++g)
        _mm512_store_si512(out + g * kTileRows + half * 16, v[g]);
    }
  }
}

inline __m512i broadcast4(const int8_t* p) {
  return _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(p));
}

// Y rows [m, m + MR), columns [n, n + 32) (+)= X rows times the tile's rows over its columns.
// Per group: int32 sums of the codes with the first level, shifted by 8, plus those with the
// second; then scaled by the rows' scales and X's units, and the biases times X's group sums.
template <int MR>
void micro(const Tile& tile, const Int8DecodeInput& in, int64_t m, int64_t k0, int64_t width,
           int64_t gs, int64_t n, int64_t valid_rows, float* Y, int64_t ldy, bool add) {
  __m512 acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  const int8_t *q1[MR], *q2[MR];
  const float *units[MR], *sums[MR];
  for (int i = 0; i < MR; ++i) {
    q1[i] = in.q1.data() + (m + i) * in.cols + k0;
    q2[i] = in.q2.data() + (m + i) * in.cols + k0;
    units[i] = in.units.data() + (m + i) * in.groups + k0 / gs;
    sums[i] = in.sums.data() + (m + i) * in.groups + k0 / gs;
  }
  const int64_t groups = width / gs;
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* w = tile.codes + g * gs * kTileRows;
    const int64_t c0 = g * gs;
    __m512i dot[MR][2];
    for (int i = 0; i < MR; ++i) dot[i][0] = dot[i][1] = _mm512_setzero_si512();
    auto level = [&](const int8_t* const(&q)[MR]) {
      for (int64_t k = 0; k < gs; k += 4) {
        const __m512i w0 = _mm512_loadu_si512(w + k * kTileRows);
        const __m512i w1 = _mm512_loadu_si512(w + k * kTileRows + 64);
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
          const __m512i x = broadcast4(q[i] + c0 + k);
          dot[i][0] = dpbusd(dot[i][0], w0, x);
          dot[i][1] = dpbusd(dot[i][1], w1, x);
        }
      }
    };
    level(q1);
    for (int i = 0; i < MR; ++i) {
      dot[i][0] = _mm512_slli_epi32(dot[i][0], 8);
      dot[i][1] = _mm512_slli_epi32(dot[i][1], 8);
    }
    level(q2);
    const float* scale = tile.scales + g * kTileRows;
    const float* bias = tile.biases + g * kTileRows;
    for (int h = 0; h < 2; ++h) {
      const __m512 s = _mm512_loadu_ps(scale + 16 * h), b = _mm512_loadu_ps(bias + 16 * h);
      for (int i = 0; i < MR; ++i) {
        const __m512 d = _mm512_mul_ps(_mm512_cvtepi32_ps(dot[i][h]), _mm512_set1_ps(units[i][g]));
        acc[i][h] = _mm512_fmadd_ps(d, s, acc[i][h]);
        acc[i][h] = _mm512_fmadd_ps(b, _mm512_set1_ps(sums[i][g]), acc[i][h]);
      }
    }
  }
  for (int h = 0; h < 2; ++h) {
    const __mmask16 mask = first_lanes(valid_rows - 16 * h);
    if (mask == 0) continue;
    for (int i = 0; i < MR; ++i) {
      float* y = Y + (m + i) * ldy + n + 16 * h;
      __m512 v = acc[i][h];
      if (add) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, y), v);
      _mm512_mask_storeu_ps(y, mask, v);
    }
  }
}

void micro_rows(int64_t rows, const Tile& tile, const Int8DecodeInput& in, int64_t m, int64_t k0,
                int64_t width, int64_t gs, int64_t n, int64_t valid_rows, float* Y, int64_t ldy,
                bool add) {
  switch (rows) {
    case 1:
      return micro<1>(tile, in, m, k0, width, gs, n, valid_rows, Y, ldy, add);
    case 2:
      return micro<2>(tile, in, m, k0, width, gs, n, valid_rows, Y, ldy, add);
    case 3:
      return micro<3>(tile, in, m, k0, width, gs, n, valid_rows, Y, ldy, add);
    case 4:
      return micro<4>(tile, in, m, k0, width, gs, n, valid_rows, Y, ldy, add);
    case 5:
      return micro<5>(tile, in, m, k0, width, gs, n, valid_rows, Y, ldy, add);
    default:
      return micro<kRowBlock>(tile, in, m, k0, width, gs, n, valid_rows, Y, ldy, add);
  }
}

void int8_gemm_rows_avx512(const QuantizedMatrix& W, const Int8DecodeInput& in, int64_t M,
                           int64_t n0, int64_t n1, float* Y, int64_t ldy) {
  const int64_t gs = W.group_size;
  for_each_tile_block<kRowBlock>(
      W, M, n0, n1,
      [&](int64_t n, int64_t k0, int64_t width, Tile& tile) { fill_tile(W, n, k0, width, tile); },
      [&](const Tile& tile, int64_t m, int64_t rows, int64_t n, int64_t k0, int64_t width,
          int64_t valid_rows,
          bool add) { micro_rows(rows, tile, in, m, k0, width, gs, n, valid_rows, Y, ldy, add); });
}

}  // namespace

}  // namespace glm4::quant_detail

#pragma GCC pop_options

namespace glm4::quant_detail {

void int8_gemm_rows(const QuantizedMatrix& W, const Int8DecodeInput& in, int64_t M, int64_t n0,
                    int64_t n1, float* Y, int64_t ldy, Int8Isa isa) {
  if (isa == Int8Isa::kAvx2)
    int8_gemm_rows_avx2(W, in, M, n0, n1, Y, ldy);
  else
    int8_gemm_rows_avx512(W, in, M, n0, n1, Y, ldy);
}

}  // namespace glm4::quant_detail
