// The AVX-512 VNNI int8 decode kernel's rows (quant_decode_int8.h), for every code width:
// 4 bits (nibbles: 128 columns a step, even columns then odd ones), 8 bits (bytes: 64 a step), and
// 2, 3, 5 and 6 bits (mlx's packs of 8 codes in `Bits` bytes: 64 codes a step from 8 * Bits bytes,
// spread to bytes by vpermb and vpmultishiftqb of AVX512-VBMI, then as 8 bits).
// Include it only inside a `#pragma GCC target` region with AVX-512 F/BW/VL/DQ, VNNI and F16C
// (and VBMI where the packed widths are instantiated), after quant_simd.h: the definitions have
// internal linkage, so each kernel file gets its own copy for its own instruction set.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "autograd/kernels/quant_decode_int8.h"
#include "autograd/kernels/quant_kernels.h"
#include "autograd/kernels/quant_simd.h"

namespace glm4::quant_detail {
namespace {

constexpr bool packed_width(int bits) { return bits == 2 || bits == 3 || bits == 5 || bits == 6; }

// 64 codes of a packed width from `valid` bytes at p (8 * Bits of them in a full step), one a
// byte: pack i's Bits bytes go to 64-bit lane i, and byte k of the lane takes the Bits bits from
// bit k * Bits on. Needs AVX512-VBMI.
template <int Bits>
__m512i spread_codes(const uint8_t* p, int64_t valid) {
  static_assert(packed_width(Bits));
  alignas(64) static constexpr auto kTables = [] {
    struct {
      uint8_t index[64], shift[64];
    } t{};
    for (int lane = 0; lane < 8; ++lane)
      for (int k = 0; k < 8; ++k) {
        t.index[8 * lane + k] = uint8_t(lane * Bits + std::min(k, Bits - 1));
        t.shift[8 * lane + k] = uint8_t(k * Bits);
      }
    return t;
  }();
  const __m512i bytes = _mm512_maskz_loadu_epi8(
      __mmask64((uint64_t(1) << std::min<int64_t>(valid, 8 * Bits)) - 1), p);
  const __m512i lanes = _mm512_permutexvar_epi8(_mm512_load_si512(kTables.index), bytes);
  const __m512i fields = _mm512_multishift_epi64_epi8(_mm512_load_si512(kTables.shift), lanes);
  return _mm512_and_si512(fields, _mm512_set1_epi8(char((1 << Bits) - 1)));
}

// The scales (or biases) of the groups of a block at element i of `params`, values of S, widened
// to fp32: the first `count` of its 16 lanes (a row's last block can be shorter), zero past them.
// One masked load and a widening; widen_params16, which takes any dtype, made a 4-bit step 15%
// slower inline (its masks and dtype branches; Zen 5, W in L2) and Flash's 1536-wide rows end on
// a half block.
template <DType S>
__m512 widen_block(const void* params, int64_t i, __mmask16 lanes) {
  if constexpr (S == DType::F32)
    return _mm512_maskz_loadu_ps(lanes, static_cast<const float*>(params) + i);
  const __m256i h = _mm256_maskz_loadu_epi16(lanes, static_cast<const uint16_t*>(params) + i);
  if constexpr (S == DType::BF16)
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  else
    return _mm512_cvtph_ps(h);
}

// Rows [n, n + R) of W against M rows of the input, W's scales and biases of dtype S. Lane i of a
// step's dot products sums the columns [i, i + 1) * lane_cols of the step, which lie in one group.
template <int Bits, int M, int R, DType S>
void rows(const QuantizedMatrix& W, const Int8DecodeInput& in, int64_t m0, int64_t n, float* Y,
          int64_t ldy, bool accumulate) {
  const int64_t K = W.cols, gs = W.group_size, groups = W.groups();
  constexpr int64_t kStep = Bits == 4 ? 128 : 64, kLane = kStep / 16;
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const int group_shift = __builtin_ctz(unsigned(gs));  // group sizes are powers of two
  // The group of each lane relative to the step's first column's group.
  const __m512i lane_group = _mm512_srli_epi32(
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(int32_t(kLane))),
      group_shift);
  Int8InputRow x[M];
  for (int m = 0; m < M; ++m) x[m] = int8_input_row(in, m0 + m);
  const uint8_t* row[R];
  __m512 acc[R][M];
  for (int r = 0; r < R; ++r) {
    row[r] = W.row(n + r);
    for (int m = 0; m < M; ++m) acc[r][m] = _mm512_setzero_ps();
  }
  const int64_t ahead_rows = prefetch_rows_ahead(R, W.row_bytes());
  const int64_t code_ahead = ahead_rows * W.row_bytes();
  for (int64_t gb = 0; gb < groups; gb += kParamBlock) {
    const int64_t count = std::min(kParamBlock, groups - gb);
    const __mmask16 lanes = first_lanes(count);
    __m512 scale_unit[R][M];  // scale_g * unit_g of the block's 16 groups
    for (int r = 0; r < R; ++r) {
      const int64_t at = (n + r) * groups + gb;
      prefetch_params_l1(W, n + r + ahead_rows, gb, groups);
      const __m512 scale = widen_block<S>(W.scales, at, lanes);
      const __m512 bias = widen_block<S>(W.biases, at, lanes);
      for (int m = 0; m < M; ++m) {  // the lanes are summed at the end, so the bias term joins them
        acc[r][m] = _mm512_fmadd_ps(bias, _mm512_loadu_ps(x[m].sums + gb), acc[r][m]);
        scale_unit[r][m] = _mm512_mul_ps(scale, _mm512_loadu_ps(x[m].units + gb));
      }
    }
    const int64_t c0 = gb * gs, c1 = (gb + count) * gs;
    // A step of kStep columns; only the last of a row can be short (c1 <= K, and only the last
    // block ends off a step), so the others load their codes without a mask or a branch.
    auto step = [&](int64_t c, auto full) {
      const __m512i group =
          _mm512_add_epi32(_mm512_set1_epi32(int32_t((c - c0) >> group_shift)), lane_group);
      __m512i xa1[M], xa2[M], xb1[M], xb2[M];
      for (int m = 0; m < M; ++m) {
        xa1[m] = _mm512_loadu_si512(x[m].q1 + c);
        xa2[m] = _mm512_loadu_si512(x[m].q2 + c);
        if constexpr (Bits == 4) {
          xb1[m] = _mm512_loadu_si512(x[m].q1 + c + 64);
          xb2[m] = _mm512_loadu_si512(x[m].q2 + c + 64);
        }
        // Held in registers: GCC would otherwise fold each into every row's dot products,
        // and on Zen 4 the 4R loads of 64 bytes a step outweigh the arithmetic.
        asm("" : "+v"(xa1[m]), "+v"(xa2[m]));
        if constexpr (Bits == 4) asm("" : "+v"(xb1[m]), "+v"(xb2[m]));
      }
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = row[r] + c * Bits / 8;
        prefetch_l1(p + code_ahead);
        __m512i v;
        if constexpr (packed_width(Bits))
          v = spread_codes<Bits>(p, decltype(full)::value ? 8 * Bits : (K - c) * Bits / 8);
        else if constexpr (decltype(full)::value)
          v = _mm512_loadu_si512(p);
        else
          v = load_codes(p, (K - c) * Bits / 8);
        __m512i lo = v, hi = v;
        if constexpr (Bits == 4) {
          lo = _mm512_and_si512(v, nibble);
          hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
        }
        for (int m = 0; m < M; ++m) {
          // (first level << 8) + second level, the second accumulated onto the shifted first.
          __m512i both = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xa1[m]);
          if constexpr (Bits == 4) both = _mm512_dpbusd_epi32(both, hi, xb1[m]);
          both = _mm512_dpbusd_epi32(_mm512_slli_epi32(both, 8), lo, xa2[m]);
          if constexpr (Bits == 4) both = _mm512_dpbusd_epi32(both, hi, xb2[m]);
          acc[r][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(both),
                                      _mm512_permutexvar_ps(group, scale_unit[r][m]), acc[r][m]);
        }
      }
    };
    int64_t c = c0;
    for (; c + kStep <= c1; c += kStep) step(c, std::true_type{});
    if (c < c1) step(c, std::false_type{});
  }
  emit_sums<M, R>(acc, n, Y, ldy, accumulate);
}

template <int Bits, int M, DType S>
void rows_m(const QuantizedMatrix& W, const Int8DecodeInput& in, int64_t m0, int64_t n0, int64_t n1,
            float* Y, int64_t ldy, bool accumulate) {
  // What fits in the 32 vector registers. One input row takes 8 rows of W at once: the step's
  // input loads and group lanes then serve twice the rows, and each step has 8 independent dot
  // products in flight (Zen 5, one core, 4 bits: 12% less time a row with W in L2 than 4 rows).
  // Two or three input rows take 2 (three: 1.4 ns a 64-byte step an input row against 1.9 with
  // 1). Four run as two passes of two (rows_bits).
  static_assert(M <= 3);
  constexpr int R = M == 1 ? 8 : 2;
  int64_t n = n0;
  for (; n + R <= n1; n += R) rows<Bits, M, R, S>(W, in, m0, n, Y, ldy, accumulate);
  for (; n < n1; ++n) rows<Bits, M, 1, S>(W, in, m0, n, Y, ldy, accumulate);
}

template <int Bits>
void rows_bits(const QuantizedMatrix& W, const Int8DecodeInput& in, int64_t m0, int64_t M,
               int64_t n0, int64_t n1, float* Y, int64_t ldy, bool accumulate) {
  auto with_scales = [&]<DType S>() {
    with_input_rows(M, [&](auto input_rows) {
      constexpr int kM = decltype(input_rows)::value;
      if constexpr (kM <= 3) {
        rows_m<Bits, kM, S>(W, in, m0, n0, n1, Y, ldy, accumulate);
      } else {
        // Two passes of two input rows over each 16 rows of W, the second reading them from L1:
        // four at once hold 16 registers of input and take one row of W a pass (1.9 ns a
        // 64-byte step an input row, against 1.35 for two). Each output is the same sum.
        constexpr int64_t kRows = 16;
        for (int64_t n = n0; n < n1; n += kRows) {
          const int64_t end = std::min(n1, n + kRows);
          rows_m<Bits, 2, S>(W, in, m0, n, end, Y, ldy, accumulate);
          rows_m<Bits, 2, S>(W, in, m0 + 2, n, end, Y + 2 * ldy, ldy, accumulate);
        }
      }
    });
  };
  switch (W.scale_dtype) {
    case DType::BF16:
      return with_scales.template operator()<DType::BF16>();
    case DType::F16:
      return with_scales.template operator()<DType::F16>();
    default:  // F32, the only other dtype a QuantizedMatrix's scales take
      return with_scales.template operator()<DType::F32>();
  }
}

}  // namespace
}  // namespace glm4::quant_detail
