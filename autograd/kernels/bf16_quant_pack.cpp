// 4- and 8-bit affine weights dequantized straight into the bf16 kernels' layouts (rows for the
// forward, pairs for the input gradient): the same fp32 values as dequantize_tile_f32 (one fma of
// code, scale and bias) with the same rounding to bf16 as the activation packs, without fp32 and
// bf16 tiles in between. 4-bit codes index a table of their group's 16 rounded values (vpermw).
#include "autograd/kernels/bf16_internal.h"
#include "autograd/kernels/bf16_target.h"
#include "base/check.h"

namespace glm4::kernels::bf16 {

namespace {

// Group g of row r's scale (or bias), widened to fp32 (exactly).
template <DType T>
GLM4_AVX512BF16 inline float param_at(const void* params, int64_t i) {
  if constexpr (T == DType::F32) {
    return static_cast<const float*>(params)[i];
  } else if constexpr (T == DType::BF16) {
    const uint32_t bits = uint32_t(static_cast<const uint16_t*>(params)[i]) << 16;
    float out;
    __builtin_memcpy(&out, &bits, sizeof out);
    return out;
  } else {
    return _cvtsh_ss(static_cast<const uint16_t*>(params)[i]);
  }
}

// 4-bit codes c0..c15 of 8 bytes (byte i: code 2i in its low nibble, 2i + 1 in its high one), as
// 16 bytes in column order.
GLM4_AVX512BF16 inline __m128i nibbles16(const uint8_t* p) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i low = _mm_set1_epi8(0x0f);
  return _mm_unpacklo_epi8(_mm_and_si128(bytes, low), _mm_and_si128(_mm_srli_epi16(bytes, 4), low));
}

// The 16 values of a 4-bit group, fma(code, scale, bias) rounded to bf16: code c's at word c.
GLM4_AVX512BF16 inline __m256i code_table(float scale, float bias) {
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  return __m256i(
      _mm512_cvtneps_pbh(_mm512_fmadd_ps(iota, _mm512_set1_ps(scale), _mm512_set1_ps(bias))));
}

// 16 8-bit codes dequantized and rounded to bf16, each in the low half of a dword.
GLM4_AVX512BF16 inline __m512i bytes16(const uint8_t* p, __m512 scale, __m512 bias) {
  const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m512 value =
      _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(codes)), scale, bias);
  return _mm512_cvtepu16_epi32(__m256i(_mm512_cvtneps_pbh(value)));
}

// Rows n and n + 1 (either may be past n1: zeros) into one pair row of every column group:
// dword j of a column group's pair row is (row n, column j) in its low half, (row n + 1,
// column j) in its high one. 4-bit codes index a table of both rows' group values (vpermw).
template <int Bits, DType T>
GLM4_AVX512BF16 void pack_pair(const QuantizedMatrix& W, int64_t n, int64_t n1, int64_t c0,
                               int64_t column_groups, uint16_t* dst, int64_t group_stride) {
  const int64_t groups = W.groups(), gs = W.group_size;
  const bool has[2] = {n < n1, n + 1 < n1};
  const uint8_t* rows[2] = {has[0] ? W.row(n) : nullptr, has[1] ? W.row(n + 1) : nullptr};
  __m512i table = _mm512_setzero_si512();  // 4 bits: row n's 16 values, then row n + 1's
  __m512 scale[2] = {}, bias[2] = {};      // 8 bits
  int64_t loaded = -1;                     // the quantization group held
  for (int64_t g = 0; g < column_groups; ++g) {
    const int64_t c = c0 + g * kGroup;
    if (c / gs != loaded) {
      loaded = c / gs;
      __m256i half[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
      for (int i = 0; i < 2; ++i) {
        if (!has[i]) continue;
        const float s = param_at<T>(W.scales, (n + i) * groups + loaded);
        const float b = param_at<T>(W.biases, (n + i) * groups + loaded);
        if constexpr (Bits == 4) {
          half[i] = code_table(s, b);
        } else {
          scale[i] = _mm512_set1_ps(s);
          bias[i] = _mm512_set1_ps(b);
        }
      }
      if constexpr (Bits == 4)
        table = _mm512_inserti64x4(_mm512_castsi256_si512(half[0]), half[1], 1);
    }
    __m512i out;
    if constexpr (Bits == 4) {
      const __m128i even = has[0] ? nibbles16(rows[0] + c / 2) : _mm_setzero_si128();
      const __m128i odd = _mm_or_si128(has[1] ? nibbles16(rows[1] + c / 2) : _mm_setzero_si128(),
                                       _mm_set1_epi8(16));
      const __m256i index =
          _mm256_set_m128i(_mm_unpackhi_epi8(even, odd), _mm_unpacklo_epi8(even, odd));
      out = _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(index), table);
    } else {
      const __m512i even =
          has[0] ? bytes16(rows[0] + c, scale[0], bias[0]) : _mm512_setzero_si512();
      const __m512i odd = has[1] ? bytes16(rows[1] + c, scale[1], bias[1]) : _mm512_setzero_si512();
      out = _mm512_or_si512(even, _mm512_slli_epi32(odd, 16));
    }
    _mm512_storeu_si512(dst + g * group_stride, out);
  }
}

template <int Bits, DType T>
GLM4_AVX512BF16 void pack_pairs(const QuantizedMatrix& W, int64_t n0, int64_t n1, int64_t c0,
                                int64_t c1, uint16_t* dst) {
  const int64_t kb = kblocks(n1 - n0), column_groups = (c1 - c0) / kGroup;
  for (int64_t b = 0; b < kb; ++b)
    for (int64_t p = 0; p < 16; ++p)
      pack_pair<Bits, T>(W, n0 + b * kKBlock + 2 * p, n1, c0, column_groups,
                         dst + b * kBlockElems + p * 32, kb * kBlockElems);
}

// 4-bit codes c0..c31 of 16 bytes, as 32 words in column order.
GLM4_AVX512BF16 inline __m512i nibbles32(const uint8_t* p) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i low = _mm_set1_epi8(0x0f);
  const __m128i even = _mm_and_si128(bytes, low),
                odd = _mm_and_si128(_mm_srli_epi16(bytes, 4), low);
  return _mm512_cvtepu8_epi16(
      _mm256_set_m128i(_mm_unpackhi_epi8(even, odd), _mm_unpacklo_epi8(even, odd)));
}

// 16 8-bit codes dequantized (a function, not a lambda: a lambda would not take the target
// attribute, and without -mavx512f the build fails).
GLM4_AVX512BF16 inline __m512 dequant16(const uint8_t* p, __m512 scale, __m512 bias) {
  const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(codes)), scale, bias);
}

// Row r's reduction [k0, k1) (whole k-blocks) into its row of every k-block, kb_stride apart.
template <int Bits, DType T>
GLM4_AVX512BF16 void pack_row(const QuantizedMatrix& W, int64_t r, int64_t k0, int64_t k1,
                              uint16_t* dst) {
  const int64_t groups = W.groups(), gs = W.group_size;
  const uint8_t* row = W.row(r);
  __m512i table = _mm512_setzero_si512();  // 4 bits: the group's 16 values
  __m512 scale = _mm512_setzero_ps(), bias = _mm512_setzero_ps();
  int64_t loaded = -1;
  for (int64_t k = k0; k < k1; k += kKBlock, dst += kBlockElems) {
    if (k / gs != loaded) {
      loaded = k / gs;
      const float s = param_at<T>(W.scales, r * groups + loaded);
      const float b = param_at<T>(W.biases, r * groups + loaded);
      if constexpr (Bits == 4) {
        table = _mm512_castsi256_si512(code_table(s, b));
      } else {
        scale = _mm512_set1_ps(s);
        bias = _mm512_set1_ps(b);
      }
    }
    if constexpr (Bits == 4) {
      _mm512_storeu_si512(dst, _mm512_permutexvar_epi16(nibbles32(row + k / 2), table));
    } else {
      _mm512_storeu_si512(dst, __m512i(_mm512_cvtne2ps_pbh(dequant16(row + k + 16, scale, bias),
                                                           dequant16(row + k, scale, bias))));
    }
  }
}

template <int Bits, DType T>
GLM4_AVX512BF16 void pack_rows(const QuantizedMatrix& W, int64_t r0, int64_t r1, int64_t k0,
                               int64_t k1, uint16_t* dst) {
  const int64_t kb = kblocks(k1 - k0);
  for (int64_t g = 0; g < groups(r1 - r0); ++g)
    for (int64_t i = 0; i < kGroup; ++i) {
      const int64_t r = r0 + g * kGroup + i;
      uint16_t* out = dst + g * kb * kBlockElems + i * kKBlock;
      if (r < r1) {
        pack_row<Bits, T>(W, r, k0, k1, out);
        continue;
      }
      for (int64_t b = 0; b < kb; ++b)
        _mm512_storeu_si512(out + b * kBlockElems, _mm512_setzero_si512());
    }
}

// fn.template operator()<Bits, T>() for W's width (4 or 8) and scale dtype.
template <typename Fn>
void with_format(const QuantizedMatrix& W, Fn&& fn) {
  auto with_dtype = [&]<int Bits>() {
    switch (W.scale_dtype) {
      case DType::F32:
        return fn.template operator()<Bits, DType::F32>();
      case DType::BF16:
        return fn.template operator()<Bits, DType::BF16>();
      case DType::F16:
        return fn.template operator()<Bits, DType::F16>();
    }
  };
  if (W.bits == 4) return with_dtype.template operator()<4>();
  with_dtype.template operator()<8>();
}

}  // namespace

bool pack_quant_supported(const QuantizedMatrix& W) { return W.bits == 4 || W.bits == 8; }

void pack_rows_quant(const QuantizedMatrix& W, int64_t r0, int64_t r1, int64_t k0, int64_t k1,
                     uint16_t* dst) {
  GLM4_CHECK(pack_quant_supported(W) && k0 % kKBlock == 0 && k1 % kKBlock == 0,
             "[pack_rows_quant] ", W.bits, "-bit codes, reduction [", k0, ", ", k1, ")");
  with_format(W, [&]<int Bits, DType T>() { pack_rows<Bits, T>(W, r0, r1, k0, k1, dst); });
}

void pack_pairs_quant(const QuantizedMatrix& W, int64_t n0, int64_t n1, int64_t c0, int64_t c1,
                      uint16_t* dst) {
  GLM4_CHECK(pack_quant_supported(W) && c0 % kGroup == 0 && c1 % kGroup == 0, "[pack_pairs_quant] ",
             W.bits, "-bit codes, columns [", c0, ", ", c1, ")");
  with_format(W, [&]<int Bits, DType T>() { pack_pairs<Bits, T>(W, n0, n1, c0, c1, dst); });
}

}  // namespace glm4::kernels::bf16
