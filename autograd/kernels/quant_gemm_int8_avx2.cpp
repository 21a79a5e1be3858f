// The int8 GEMM of quant_gemm_int8.h in AVX2 (Zen 3 and other CPUs without AVX-512). The same
// tiles of 32 rows and 512 columns of unpacked codes (four consecutive codes of a row to a 32-bit
// lane), the same two int8 levels of X, and the same exact int32 sums over each group. 4-bit codes:
// vpmaddubsw (code x level, pairs to int16: at most 2 * 15 * 127 a pair) summed in int16 over 32
// columns (at most 8 * 3810, short of saturating) and widened by vpmaddwd, whose factor (256 or 1)
// weighs the level. 8-bit codes (up to 255: vpmaddubsw would saturate): vpmaddwd of the codes,
// split into int16 pairs, with both levels joined into one int16 (256 q1 + q2). The fp32 steps
// after the int32 sums are the AVX-512 kernel's in the same order, so both give the same bits.
#include <algorithm>
#include <vector>

// GCC 12 flags the self-initialised "undefined" vectors inside its own intrinsics wherever they
// are inlined, so for the whole file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "autograd/kernels/quant_gemm_int8_avx2.h"
#include "autograd/kernels/quant_kernels.h"

#pragma GCC push_options
// CMakeLists.txt adds -mno-avx512f for this file, as for quant_kernels_avx2.cpp: pure AVX2 code
// even on an AVX-512 build machine.
#pragma GCC target("avx2,fma,f16c")
#include "autograd/kernels/quant_gemm_int8_tiles.h"

namespace glm4::quant_detail {

namespace {

// A tile (quant_gemm_int8_tiles.h) is two halves of 16 rows, each two vectors of 8.
constexpr int kRowBlock = 2;        // rows of X a micro-kernel call keeps in registers
constexpr int64_t kInt16Cols = 32;  // columns summed in int16 before widening

// 32 columns of row r from column c as one code a byte, in column order: at 4 bits byte p of the
// row holds columns 2p (low nibble) and 2p + 1.
inline __m256i row_codes32(const QuantizedMatrix& W, int64_t r, int64_t c) {
  if (r >= W.rows) return _mm256_setzero_si256();
  if (W.bits == 8) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(W.row(r) + c));
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(W.row(r) + c / 2));
  const __m128i nibble = _mm_set1_epi8(0x0F);
  const __m128i low = _mm_and_si128(packed, nibble);
  const __m128i high = _mm_and_si128(_mm_srli_epi16(packed, 4), nibble);
  return _mm256_set_m128i(_mm_unpackhi_epi8(low, high), _mm_unpacklo_epi8(low, high));
}

// v[i] holds 8 dwords of row i; afterwards v[j] holds dword j of rows 0..7.
inline void transpose8x8_epi32(__m256i (&v)[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    v[j] = _mm256_permute2x128_si256(u[j], u[j + 4], 0x20);
    v[j + 4] = _mm256_permute2x128_si256(u[j], u[j + 4], 0x31);
  }
}

void fill_tile(const QuantizedMatrix& W, int64_t n, int64_t k0, int64_t width, Tile& tile) {
  // Per 8 rows and 32 columns: the rows' codes, transposed so that vector j holds columns
  // 4j..4j+3 of each row, which is the tile's k4 entry c / 4 + j for those rows.
  for (int64_t c = 0; c < width; c += 32)
    for (int64_t r0 = 0; r0 < kTileRows; r0 += 8) {
      __m256i v[8];
      for (int i = 0; i < 8; ++i) v[i] = row_codes32(W, n + r0 + i, k0 + c);
      transpose8x8_epi32(v);
      for (int j = 0; j < 8; ++j)
        _mm256_store_si256(
            reinterpret_cast<__m256i*>(tile.codes + (c / 4 + j) * kTileRows * 4 + r0 * 4), v[j]);
    }
  const int64_t gs = W.group_size, groups = width / gs, g0 = k0 / gs;
  float row_params[kBlockCols / 32];
  for (int64_t r = 0; r < kTileRows; ++r) {
    const bool inside = n + r < W.rows;
    if (inside) load_group_params(W, W.scales, n + r, g0, groups, row_params);
    for (int64_t g = 0; g < groups; ++g)
      tile.scales[g * kTileRows + r] = inside ? row_params[g] : 0;
    if (inside) load_group_params(W, W.biases, n + r, g0, groups, row_params);
    for (int64_t g = 0; g < groups; ++g)
      tile.biases[g * kTileRows + r] = inside ? row_params[g] : 0;
  }
}

inline __m256i broadcast4(const int8_t* p) {
  return _mm256_set1_epi32(*reinterpret_cast<const int32_t*>(p));
}

// Y rows [m, m + MR), columns [n + 16 half, + 16) (+)= X rows times the tile's half over its
// columns. Per group: int32 sums of the codes with the first level times 256, plus those with
// the second; then scaled by the rows' scales and X's units, and the biases times X's group sums.
// Kept out of the tile loop: inlined there, GCC 12's code ran about 20% slower (bench_quant
// --shape 9b, prefill 64 rows).
template <int Bits, int MR>
__attribute__((noinline)) void micro(const Tile& tile, int half, const Int8DecodeInput& in,
                                     int64_t m, int64_t k0, int64_t width, int64_t gs, int64_t n,
                                     int64_t valid_rows, float* Y, int64_t ldy, bool add) {
  __m256 acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  Int8InputRow x[MR];
  const int16_t* wide[MR];  // 8 bits: the joined levels (Int8DecodeInput::levels16)
  for (int i = 0; i < MR; ++i) {
    x[i] = int8_input_row(in, m + i);
    if constexpr (Bits == 8) wide[i] = in.levels16.data() + (m + i) * in.cols + k0;
  }
  const __m256i first = _mm256_set1_epi16(256), second = _mm256_set1_epi16(1);
  const __m256i low_byte = _mm256_set1_epi16(0x00FF);
  const uint8_t* codes = tile.codes + half * 64;
  const int64_t groups = width / gs;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t c0 = g * gs;
    __m256i dot[MR][2];
    for (int i = 0; i < MR; ++i) dot[i][0] = dot[i][1] = _mm256_setzero_si256();
    if constexpr (Bits == 8) {
      for (int64_t k = c0; k < c0 + gs; k += 4) {
        // A lane's codes k..k+3 as int16 pairs (k, k + 2) and (k + 1, k + 3).
        const uint8_t* w = codes + k * kTileRows;
        __m256i even[2], odd[2];
        for (int h = 0; h < 2; ++h) {
          const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 32 * h));
          even[h] = _mm256_and_si256(v, low_byte);
          odd[h] = _mm256_srli_epi16(v, 8);
        }
        for (int i = 0; i < MR; ++i) {
          const __m256i xe = _mm256_set1_epi32(*reinterpret_cast<const int32_t*>(wide[i] + k));
          const __m256i xo = _mm256_set1_epi32(*reinterpret_cast<const int32_t*>(wide[i] + k + 2));
          for (int h = 0; h < 2; ++h)
            dot[i][h] = _mm256_add_epi32(
                dot[i][h],
                _mm256_add_epi32(_mm256_madd_epi16(even[h], xe), _mm256_madd_epi16(odd[h], xo)));
        }
      }
    } else {
      for (int level = 0; level < 2; ++level) {
        const __m256i factor = level == 0 ? first : second;
        for (int64_t c = c0; c < c0 + gs; c += kInt16Cols) {
          __m256i part[MR][2];
          for (int i = 0; i < MR; ++i) part[i][0] = part[i][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
          for (int64_t k = c; k < c + kInt16Cols; k += 4) {
            const uint8_t* w = codes + k * kTileRows;
            const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w));
            const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 32));
            for (int i = 0; i < MR; ++i) {
              const __m256i q = broadcast4((level == 0 ? x[i].q1 : x[i].q2) + k0 + k);
              part[i][0] = _mm256_add_epi16(part[i][0], _mm256_maddubs_epi16(w0, q));
              part[i][1] = _mm256_add_epi16(part[i][1], _mm256_maddubs_epi16(w1, q));
            }
          }
          for (int i = 0; i < MR; ++i)
            for (int h = 0; h < 2; ++h)
              dot[i][h] = _mm256_add_epi32(dot[i][h], _mm256_madd_epi16(part[i][h], factor));
        }
      }
    }
    const float* scale = tile.scales + g * kTileRows + half * 16;
    const float* bias = tile.biases + g * kTileRows + half * 16;
    const int64_t xg = k0 / gs + g;
    for (int h = 0; h < 2; ++h) {
      const __m256 s = _mm256_load_ps(scale + 8 * h), b = _mm256_load_ps(bias + 8 * h);
      for (int i = 0; i < MR; ++i) {
        const __m256 d =
            _mm256_mul_ps(_mm256_cvtepi32_ps(dot[i][h]), _mm256_set1_ps(x[i].units[xg]));
        acc[i][h] = _mm256_fmadd_ps(d, s, acc[i][h]);
        acc[i][h] = _mm256_fmadd_ps(b, _mm256_set1_ps(x[i].sums[xg]), acc[i][h]);
      }
    }
  }
  for (int h = 0; h < 2; ++h) {
    const int64_t lanes = std::min<int64_t>(8, valid_rows - 16 * half - 8 * h);
    if (lanes <= 0) continue;
    for (int i = 0; i < MR; ++i) {
      float* y = Y + (m + i) * ldy + n + 16 * half + 8 * h;
      if (lanes == 8) {
        __m256 v = acc[i][h];
        if (add) v = _mm256_add_ps(_mm256_loadu_ps(y), v);
        _mm256_storeu_ps(y, v);
        continue;
      }
      alignas(32) float part[8];
      _mm256_store_ps(part, acc[i][h]);
      for (int64_t l = 0; l < lanes; ++l) y[l] = add ? y[l] + part[l] : part[l];
    }
  }
}

template <int Bits>
void gemm_rows(const QuantizedMatrix& W, const Int8DecodeInput& in, int64_t M, int64_t n0,
               int64_t n1, float* Y, int64_t ldy) {
  const int64_t gs = W.group_size;
  for_each_tile_block<kRowBlock>(
      W, M, n0, n1,
      [&](int64_t n, int64_t k0, int64_t width, Tile& tile) { fill_tile(W, n, k0, width, tile); },
      [&](const Tile& tile, int64_t m, int64_t rows, int64_t n, int64_t k0, int64_t width,
          int64_t valid_rows, bool add) {
        for (int half = 0; half < 2 && 16 * half < valid_rows; ++half) {
          if (rows == kRowBlock)
            micro<Bits, kRowBlock>(tile, half, in, m, k0, width, gs, n, valid_rows, Y, ldy, add);
          else
            micro<Bits, 1>(tile, half, in, m, k0, width, gs, n, valid_rows, Y, ldy, add);
        }
      });
}

}  // namespace

void int8_gemm_rows_avx2(const QuantizedMatrix& W, const Int8DecodeInput& in, int64_t M, int64_t n0,
                         int64_t n1, float* Y, int64_t ldy) {
  if (W.bits == 8)
    gemm_rows<8>(W, in, M, n0, n1, Y, ldy);
  else
    gemm_rows<4>(W, in, M, n0, n1, Y, ldy);
}

}  // namespace glm4::quant_detail

#pragma GCC pop_options
