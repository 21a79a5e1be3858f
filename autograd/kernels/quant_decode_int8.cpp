#include "autograd/kernels/quant_decode_int8.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>

#include "autograd/kernels/kernel_selection.h"
#include "autograd/kernels/quant_decode_int8_avx2.h"
#include "autograd/kernels/quant_kernels.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "base/parallel.h"  // after immintrin.h, whose warnings the pragmas above silence

namespace glm4::quant_detail {

namespace {

constexpr int64_t kPadCols = 128;  // the input's columns are padded to this

int64_t round_up(int64_t a, int64_t m) { return (a + m - 1) / m * m; }

}  // namespace
}  // namespace glm4::quant_detail

// The kernels below are compiled for AVX-512 with VNNI; the code above and the exported entry
// points after pop_options keep the build's options (they run on any CPU).
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c")
#include "autograd/kernels/quant_decode_int8_rows.h"
#include "autograd/kernels/quant_simd.h"

namespace glm4::quant_detail {
namespace {

// Columns [c0, c0 + count) of a row of X (one group; count a multiple of 32) into both levels at
// their input positions; *sum gets the fp32 sum and *unit the group's unit. False on inf or NaN.
bool quantize_group(int bits, const float* x, int64_t count, int64_t c0, int8_t* q1, int8_t* q2,
                    float* sum, float* unit) {
  __m512 amax = _mm512_setzero_ps(), total = _mm512_setzero_ps();
  for (int64_t j = 0; j < count; j += 16) {
    const __m512 v = _mm512_loadu_ps(x + j);
    amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
    total = _mm512_add_ps(total, v);
  }
  const float a = _mm512_reduce_max_ps(amax);
  *sum = _mm512_reduce_add_ps(total);
  if (!std::isfinite(a) || !std::isfinite(*sum))
    return false;  // max may drop a NaN; the sum keeps it
  const float step1 = a / kInt8Level;
  *unit = step1 / kInt8SecondLevel;
  if (a == 0.0f) return true;  // both levels stay 0
  const __m512 s1 = _mm512_set1_ps(step1), u = _mm512_set1_ps(*unit);
  const __m512 lo = _mm512_set1_ps(-kInt8Level), hi = _mm512_set1_ps(kInt8Level);
  auto levels = [&](__m512 v, __m128i& l1, __m128i& l2) {
    constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const __m512 a1 =
        _mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_roundscale_ps(_mm512_div_ps(v, s1), kNearest)));
    const __m512 r = _mm512_fnmadd_ps(a1, s1, v);  // v - a1 * step1, rounded once
    const __m512 a2 =
        _mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_roundscale_ps(_mm512_div_ps(r, u), kNearest)));
    l1 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(a1));
    l2 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(a2));
  };
  // For 4 bits, 32 columns from j land as 16 even ones at j/2 of the step's first half and 16 odd
  // ones at j/2 of its second half.
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int64_t j = 0; j < count; j += 32) {
    const __m512 a0 = _mm512_loadu_ps(x + j), b0 = _mm512_loadu_ps(x + j + 16);
    const int64_t c = c0 + j;
    __m512 first = a0, second = b0;
    int64_t p0 = c, p1 = c + 16;
    if (bits == 4) {
      first = _mm512_permutex2var_ps(a0, even, b0);
      second = _mm512_permutex2var_ps(a0, odd, b0);
      p0 = int8_input_position(4, c);
      p1 = int8_input_position(4, c + 1);
    }
    __m128i l1, l2;
    levels(first, l1, l2);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q1 + p0), l1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q2 + p0), l2);
    levels(second, l1, l2);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q1 + p1), l1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q2 + p1), l2);
  }
  return true;
}

void int8_decode_rows_avx512(const QuantizedMatrix& W, const Int8DecodeInput& in, int64_t m0,
                             int64_t M, int64_t n0, int64_t n1, float* Y, int64_t ldy,
                             bool accumulate) {
  if (W.bits == 4)
    rows_bits<4>(W, in, m0, M, n0, n1, Y, ldy, accumulate);
  else if (W.bits == 8)
    rows_bits<8>(W, in, m0, M, n0, n1, Y, ldy, accumulate);
  else
    int8_decode_rows_packed(W, in, m0, M, n0, n1, Y, ldy, accumulate);
}

}  // namespace
}  // namespace glm4::quant_detail

#pragma GCC pop_options

namespace glm4::quant_detail {

bool int8_isa_runs(Int8Isa isa) {
  __builtin_cpu_init();
  switch (isa) {
    case Int8Isa::kNone:
      return true;
    case Int8Isa::kAvx2:
      return cpu_supports("avx2");
    case Int8Isa::kAvx512Vnni:
      return cpu_supports("avx512") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vnni");
  }
  return false;
}

Int8Isa int8_isa() {
  static const Int8Isa isa = [] {  // asked before every decode product: work it out once
    switch (kernels::kernel_selection().quant) {
      case kernels::QuantIsa::kAvx512:
        return int8_isa_runs(Int8Isa::kAvx512Vnni) ? Int8Isa::kAvx512Vnni : Int8Isa::kNone;
      case kernels::QuantIsa::kAvx2:
        return Int8Isa::kAvx2;  // the selection checked the CPU
      case kernels::QuantIsa::kScalar:
        break;
    }
    return Int8Isa::kNone;
  }();
  return isa;
}

bool int8_gemm_supported(int bits, Int8Isa isa) {
  return isa != Int8Isa::kNone && (bits == 4 || bits == 8);
}

bool int8_supported(int bits, Int8Isa isa) {
  if (int8_gemm_supported(bits, isa)) return true;
  static const bool vbmi = __builtin_cpu_supports("avx512vbmi");
  return isa == Int8Isa::kAvx512Vnni && vbmi && (bits == 2 || bits == 3 || bits == 5 || bits == 6);
}

void int8_decode_rows(const QuantizedMatrix& W, const Int8DecodeInput& in, int64_t m0, int64_t M,
                      int64_t n0, int64_t n1, float* Y, int64_t ldy, bool accumulate, Int8Isa isa) {
  if (isa == Int8Isa::kAvx2)
    int8_decode_rows_avx2(W, in, m0, M, n0, n1, Y, ldy, accumulate);
  else
    int8_decode_rows_avx512(W, in, m0, M, n0, n1, Y, ldy, accumulate);
}

bool prepare_int8_decode_input(const QuantizedMatrix& W, const float* X, int64_t M,
                               Int8DecodeInput& in, Int8Layout layout, Int8Isa isa) {
  const auto quantize = isa == Int8Isa::kAvx2 ? quantize_group_avx2 : quantize_group;
  const int64_t K = W.cols, gs = W.group_size;
  const int order_bits = layout == Int8Layout::kColumns ? 8 : W.bits;
  in.cols = round_up(K, kPadCols);
  in.groups = round_up(W.groups(), kParamBlock);
  in.q1.assign(size_t(M * in.cols), 0);
  in.q2.assign(size_t(M * in.cols), 0);
  in.units.assign(size_t(M * in.groups), 0.0f);
  in.sums.assign(size_t(M * in.groups), 0.0f);
  // The AVX2 kernels of 8-bit codes read both levels joined (Int8DecodeInput::levels16).
  const bool joined = isa == Int8Isa::kAvx2 && W.bits == 8;
  in.levels16.assign(joined ? size_t(M * in.cols) : 0, 0);
  std::atomic<bool> finite{true};
  // A prefill's rows are worth threads; a decode's few are not.
  parallel_for(M, 8, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1 && finite.load(std::memory_order_relaxed); ++m) {
      int8_t* q1 = in.q1.data() + m * in.cols;
      int8_t* q2 = in.q2.data() + m * in.cols;
      for (int64_t g = 0; g < W.groups(); ++g)
        if (!quantize(order_bits, X + m * K + g * gs, gs, g * gs, q1, q2,
                      &in.sums[size_t(m * in.groups + g)], &in.units[size_t(m * in.groups + g)])) {
          finite = false;
          return;
        }
      if (!joined) continue;
      int16_t* levels = in.levels16.data() + m * in.cols;
      for (int64_t c = 0; c < in.cols; ++c) {
        const int64_t to =
            layout == Int8Layout::kDecode ? c : c / 4 * 4 + (c % 4) / 2 + (c % 2) * 2;
        levels[to] = int16_t(256 * q1[c] + q2[c]);
      }
    }
  });
  return finite;
}

}  // namespace glm4::quant_detail
