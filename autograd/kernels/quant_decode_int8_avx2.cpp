// The int8 decode kernel of quant_decode_int8.h in AVX2 (Zen 3 and other CPUs without AVX-512):
// the same two int8 levels of X and the same exact int32 sums, made for 4-bit codes with
// vpmaddubsw (code x level, pairs to int16: at most 2 * 15 * 127 a pair, so never saturating) and
// vpmaddwd, for 8-bit codes with vpmaddwd alone, in place of AVX512-VNNI's vpdpbusd. Only the fp32
// accumulation order differs from the AVX-512 kernel.
#include <algorithm>
#include <cmath>
#include <cstring>

// GCC 12 flags the self-initialised "undefined" vectors inside its own intrinsics wherever they
// are inlined, so for the whole file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "autograd/kernels/quant_decode_int8_avx2.h"
#include "autograd/kernels/quant_kernels.h"

#pragma GCC push_options
// CMakeLists.txt adds -mno-avx512f for this file, as for quant_kernels_avx2.cpp: pure AVX2 code
// even on an AVX-512 build machine.
#pragma GCC target("avx2,fma,f16c")
#include "autograd/kernels/quant_simd_avx2.h"

namespace glm4::quant_detail {

namespace {

constexpr int64_t kBlockGroups = 8;    // groups whose scales and biases are widened at once
constexpr int64_t kHalf = 64;          // columns of a half step: 32 bytes of 4-bit codes
constexpr int64_t kChunkGroups = 256;  // groups set up at once by rows4_whole_halves
constexpr int64_t kLineBytes = 64;

float max8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

// Scales (or biases) of groups [g0, g0 + count) of row r as fp32, zero past count; `groups` is
// W.groups() (a division the callers make once).
inline __attribute__((always_inline)) __m256 widen_params8(const QuantizedMatrix& W,
                                                           const void* params, int64_t groups,
                                                           int64_t r, int64_t g0, int64_t count) {
  const int64_t i = r * groups + g0;
  if (count == kBlockGroups) {
    switch (W.scale_dtype) {
      case DType::F32:
        return _mm256_loadu_ps(static_cast<const float*>(params) + i);
      case DType::BF16:
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128(
                reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(params) + i))),
            16));
      case DType::F16:
        return _mm256_cvtph_ps(_mm_loadu_si128(
            reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(params) + i)));
      default:
        break;
    }
  }
  alignas(32) float part[kBlockGroups] = {};
  load_group_params(W, params, r, g0, count, part);
  return _mm256_load_ps(part);
}

// A 4-bit half step's 8-column int32 sums of (first level << 8) + second level for one row of X:
// `lo` and `hi` are the half step's low and high nibbles (its even and odd columns), the prepared
// input's even columns at `even` and its odd ones 64 further on. Each level's pair sums are at
// most 4 * 15 * 127 in an int16; the shift is vpmaddwd's factor.
inline __attribute__((always_inline)) __m256i half_step_sums(__m256i lo, __m256i hi,
                                                             const Int8InputRow& x, int64_t even) {
  auto pairs_of = [&](const int8_t* q) {
    return _mm256_add_epi16(
        _mm256_maddubs_epi16(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + even))),
        _mm256_maddubs_epi16(hi,
                             _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + even + 64))));
  };
  return _mm256_add_epi32(_mm256_madd_epi16(pairs_of(x.q1), _mm256_set1_epi16(256)),
                          _mm256_madd_epi16(pairs_of(x.q2), _mm256_set1_epi16(1)));
}

// Y[m * ldy + n + r] (+)= the sum of acc[r][m]'s lanes.
template <int M, int R>
void emit_sums(const __m256 (&acc)[R][M], int64_t n, float* Y, int64_t ldy, bool accumulate) {
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) {
      const float s = hsum(acc[r][m]);
      float& y = Y[m * ldy + n + r];
      y = accumulate ? y + s : s;
    }
}

// Rows [n, n + R) of W against M rows of the input, as quant_decode_int8.cpp's rows<Bits, M, R>.
// 4 bits: lane l of a half step's sums covers its columns [8 l, 8 l + 8), which lie in one group.
// 8 bits: codes up to 255 times a level would saturate vpmaddubsw's int16 pairs, so the codes are
// widened to int16 and multiplied by X's two levels joined into one int16, 256 q1 + q2 (at most
// 32639), with vpmaddwd: a pair is at most 2 * 255 * 32639 and a lane's int32 sum over a group of
// 128 columns 64 times that, exact; each group's sums are scaled once.
template <int Bits, int M, int R>
void rows(const QuantizedMatrix& W, const Int8DecodeInput& in, int64_t m0, int64_t n, float* Y,
          int64_t ldy, bool accumulate) {
  const int64_t K = W.cols, gs = W.group_size, groups = W.groups();
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const int group_shift = __builtin_ctz(unsigned(gs));  // group sizes are powers of two
  const __m256i lane_group =
      _mm256_srli_epi32(_mm256_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56), group_shift);
  Int8InputRow x[M];
  const int16_t* wide[M];  // 8 bits: the joined levels (Int8DecodeInput::levels16)
  for (int m = 0; m < M; ++m) {
    x[m] = int8_input_row(in, m0 + m);
    if constexpr (Bits == 8) wide[m] = in.levels16.data() + (m0 + m) * in.cols;
  }
  const uint8_t* row[R];
  __m256 acc[R][M];
  for (int r = 0; r < R; ++r) {
    row[r] = W.row(n + r);
    for (int m = 0; m < M; ++m) acc[r][m] = _mm256_setzero_ps();
  }
  const int64_t ahead_rows = prefetch_rows_ahead(R, W.row_bytes());
  const int64_t code_ahead = ahead_rows * W.row_bytes();
  for (int64_t gb = 0; gb < groups; gb += kBlockGroups) {
    const int64_t count = std::min(kBlockGroups, groups - gb);
    __m256 scale_unit[R][M];  // scale_g * unit_g of the block's 8 groups
    for (int r = 0; r < R; ++r) {
      prefetch_params_l1(W, n + r + ahead_rows, gb, groups);
      const __m256 scale = widen_params8(W, W.scales, groups, n + r, gb, count);
      const __m256 bias = widen_params8(W, W.biases, groups, n + r, gb, count);
      for (int m = 0; m < M; ++m) {  // the lanes are summed at the end, so the bias term joins them
        acc[r][m] = _mm256_fmadd_ps(bias, _mm256_loadu_ps(x[m].sums + gb), acc[r][m]);
        scale_unit[r][m] = _mm256_mul_ps(scale, _mm256_loadu_ps(x[m].units + gb));
      }
    }
    const int64_t c0 = gb * gs, c1 = (gb + count) * gs;
    if constexpr (Bits == 8) {
      for (int64_t g = 0; g < count; ++g) {
        __m256i dot[R][M];
        for (int r = 0; r < R; ++r)
          for (int m = 0; m < M; ++m) dot[r][m] = _mm256_setzero_si256();
        for (int64_t c = c0 + g * gs; c < c0 + (g + 1) * gs; c += 16) {
          __m256i levels[M];
          for (int m = 0; m < M; ++m)
            levels[m] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wide[m] + c));
          for (int r = 0; r < R; ++r) {
            if (c % 64 == 0) prefetch_l1(row[r] + c + code_ahead);
            const __m256i codes =
                _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row[r] + c)));
            for (int m = 0; m < M; ++m)
              dot[r][m] = _mm256_add_epi32(dot[r][m], _mm256_madd_epi16(codes, levels[m]));
          }
        }
        const __m256i lane = _mm256_set1_epi32(int32_t(g));
        for (int r = 0; r < R; ++r)
          for (int m = 0; m < M; ++m)
            acc[r][m] =
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[r][m]),
                                _mm256_permutevar8x32_ps(scale_unit[r][m], lane), acc[r][m]);
      }
    } else {
      for (int64_t c = c0; c < c1; c += kHalf) {
        // Byte p of a 128-column step holds columns 2p and 2p + 1; the prepared input has the
        // step's even columns at [0, 64) and its odd ones at [64, 128).
        const int64_t step = c / 128 * 128, half = (c % 128) / 2;
        const __m256i group =
            _mm256_add_epi32(_mm256_set1_epi32(int32_t((c - c0) >> group_shift)), lane_group);
        for (int r = 0; r < R; ++r) {
          const uint8_t* p = row[r] + c / 2;
          if (c % 128 == 0) prefetch_l1(p + code_ahead);
          __m256i v;
          if (c + kHalf <= K) {
            v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
          } else {  // a row's last 32 columns: only their 16 bytes are the row's
            alignas(32) uint8_t tail[32] = {};
            std::memcpy(tail, p, size_t((K - c) / 2));
            v = _mm256_load_si256(reinterpret_cast<const __m256i*>(tail));
          }
          const __m256i lo = _mm256_and_si256(v, nibble);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
          for (int m = 0; m < M; ++m) {
            const __m256i both = half_step_sums(lo, hi, x[m], step + half);
            acc[r][m] =
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(both),
                                _mm256_permutevar8x32_ps(scale_unit[r][m], group), acc[r][m]);
          }
        }
      }
    }
  }
  emit_sums<M, R>(acc, n, Y, ldy, accumulate);
}

// rows<4, M, R> where a group is whole half steps (group_size a multiple of 64, so K is too, and
// no step is a row's tail): the same exact int32 sums, but each half step lies in one group, whose
// scale_g * unit_g is broadcast from memory rather than permuted from a register, and the products
// of a whole chunk of groups are set up before its codes are read, so the loop over the codes runs
// unbroken through a row. The fp32 order differs from rows<4, M, R>'s (the bias terms come first);
// it is the same for every R, so each output is still one fixed-order sum.
template <int M, int R>
void rows4_whole_halves(const QuantizedMatrix& W, const Int8DecodeInput& in, int64_t m0, int64_t n,
                        float* Y, int64_t ldy, bool accumulate) {
  const int64_t gs = W.group_size, groups = W.groups();
  const int64_t ahead_rows = prefetch_rows_ahead(R, W.row_bytes());
  const int64_t code_ahead = ahead_rows * W.row_bytes();
  const int group_shift = __builtin_ctz(unsigned(gs));
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  Int8InputRow x[M];
  for (int m = 0; m < M; ++m) x[m] = int8_input_row(in, m0 + m);
  const uint8_t* row[R];
  __m256 acc[R][M];
  for (int r = 0; r < R; ++r) {
    row[r] = W.row(n + r);
    for (int m = 0; m < M; ++m) acc[r][m] = _mm256_setzero_ps();
  }
  const int64_t params_a_line = kLineBytes / int64_t(dtype_size(W.scale_dtype));
  alignas(32) float scale_unit[R][M][kChunkGroups];  // scale_g * unit_g of a chunk's groups
  for (int64_t g0 = 0; g0 < groups; g0 += kChunkGroups) {
    const int64_t chunk = std::min(kChunkGroups, groups - g0);
    for (int r = 0; r < R; ++r) {
      for (int64_t gb = g0; gb < g0 + chunk; gb += kBlockGroups) {
        const int64_t count = std::min(kBlockGroups, g0 + chunk - gb);
        if (n + r + ahead_rows < W.rows && (gb - g0) % params_a_line == 0)
          prefetch_params_l1(W, n + r + ahead_rows, gb, groups);
        const __m256 scale = widen_params8(W, W.scales, groups, n + r, gb, count);
        const __m256 bias = widen_params8(W, W.biases, groups, n + r, gb, count);
        for (int m = 0; m < M; ++m) {  // the lanes are summed at the end, so bias terms join them
          acc[r][m] = _mm256_fmadd_ps(bias, _mm256_loadu_ps(x[m].sums + gb), acc[r][m]);
          _mm256_store_ps(scale_unit[r][m] + (gb - g0),
                          _mm256_mul_ps(scale, _mm256_loadu_ps(x[m].units + gb)));
        }
      }
    }
    // One half step: 32 bytes of each row's codes at byte `at`, against the prepared input's 64
    // even columns at `even` and odd ones 64 further on, scaled by scale_unit[.][.][g]; the first
    // half of a step prefetches the 64 bytes of both.
    auto half_step = [&](int64_t at, int64_t even, int64_t g, bool first_half) {
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = row[r] + at;
        if (first_half) prefetch_l1(p + code_ahead);
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
        const __m256i lo = _mm256_and_si256(v, nibble);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
        for (int m = 0; m < M; ++m) {
          const __m256i both = half_step_sums(lo, hi, x[m], even);
          acc[r][m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(both),
                                      _mm256_broadcast_ss(&scale_unit[r][m][g]), acc[r][m]);
        }
      }
    };
    const int64_t c0 = g0 * gs, c1 = (g0 + chunk) * gs;
    int64_t c = c0;
    for (; c + 128 <= c1; c += 128) {  // a whole step: its first 64 columns, then its last 64
      half_step(c / 2, c, (c - c0) >> group_shift, true);
      half_step(c / 2 + 32, c + 32, (c + 64 - c0) >> group_shift, false);
    }
    if (c < c1) half_step(c / 2, c, (c - c0) >> group_shift, true);  // the row ends mid-step
  }
  emit_sums<M, R>(acc, n, Y, ldy, accumulate);
}

template <int Bits, int M>
void rows_m(const QuantizedMatrix& W, const Int8DecodeInput& in, int64_t m0, int64_t n0, int64_t n1,
            float* Y, int64_t ldy, bool accumulate) {
  constexpr int R = M == 1 ? 4 : M == 2 ? 2 : 1;  // what fits in the 16 vector registers
  int64_t n = n0;
  if (Bits == 4 && W.group_size % kHalf == 0) {
    for (; n + R <= n1; n += R) rows4_whole_halves<M, R>(W, in, m0, n, Y, ldy, accumulate);
    for (; n < n1; ++n) rows4_whole_halves<M, 1>(W, in, m0, n, Y, ldy, accumulate);
    return;
  }
  for (; n + R <= n1; n += R) rows<Bits, M, R>(W, in, m0, n, Y, ldy, accumulate);
  for (; n < n1; ++n) rows<Bits, M, 1>(W, in, m0, n, Y, ldy, accumulate);
}

template <int Bits>
void rows_bits(const QuantizedMatrix& W, const Int8DecodeInput& in, int64_t m0, int64_t M,
               int64_t n0, int64_t n1, float* Y, int64_t ldy, bool accumulate) {
  with_input_rows(M, [&](auto input_rows) {
    rows_m<Bits, decltype(input_rows)::value>(W, in, m0, n0, n1, Y, ldy, accumulate);
  });
}

}  // namespace

bool quantize_group_avx2(int bits, const float* x, int64_t count, int64_t c0, int8_t* q1,
                         int8_t* q2, float* sum, float* unit) {
  __m256 amax = _mm256_setzero_ps(), total = _mm256_setzero_ps();
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t j = 0; j < count; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v));
    total = _mm256_add_ps(total, v);
  }
  const float a = max8(amax);
  *sum = hsum(total);
  if (!std::isfinite(a) || !std::isfinite(*sum))
    return false;  // max may drop a NaN; the sum keeps it
  const float step1 = a / kInt8Level;
  *unit = step1 / kInt8SecondLevel;
  if (a == 0.0f) return true;  // both levels stay 0
  const __m256 s1 = _mm256_set1_ps(step1), u = _mm256_set1_ps(*unit);
  const __m256 lo = _mm256_set1_ps(-kInt8Level), hi = _mm256_set1_ps(kInt8Level);
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  for (int64_t j = 0; j < count; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    const __m256 a1 =
        _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_round_ps(_mm256_div_ps(v, s1), kNearest)));
    const __m256 r = _mm256_fnmadd_ps(a1, s1, v);  // v - a1 * step1, rounded once
    const __m256 a2 =
        _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_round_ps(_mm256_div_ps(r, u), kNearest)));
    alignas(32) int32_t l1[8], l2[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(l1), _mm256_cvtps_epi32(a1));
    _mm256_store_si256(reinterpret_cast<__m256i*>(l2), _mm256_cvtps_epi32(a2));
    for (int i = 0; i < 8; ++i) {
      const int64_t p = int8_input_position(bits, c0 + j + i);
      q1[p] = int8_t(l1[i]);
      q2[p] = int8_t(l2[i]);
    }
  }
  return true;
}

void int8_decode_rows_avx2(const QuantizedMatrix& W, const Int8DecodeInput& in, int64_t m0,
                           int64_t M, int64_t n0, int64_t n1, float* Y, int64_t ldy,
                           bool accumulate) {
  if (W.bits == 8)
    rows_bits<8>(W, in, m0, M, n0, n1, Y, ldy, accumulate);
  else
    rows_bits<4>(W, in, m0, M, n0, n1, Y, ldy, accumulate);
}

}  // namespace glm4::quant_detail

#pragma GCC pop_options
