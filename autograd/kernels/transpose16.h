// A 16 x 16 transpose of 32-bit lanes in AVX-512 registers, shared by the kernels that repack
// weights (bf16_pack.cpp, quant_gemm_int8.cpp). Its target is AVX-512F alone, so it inlines into
// any function compiled for a superset of it.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

namespace glm4::kernels {

// r[i] (16 rows of 16 dwords) becomes its transpose: afterwards r[j] is column j.
__attribute__((target("avx512f"), always_inline)) inline void transpose16(__m512i r[16]) {
  __m512i u[16];
  for (int q = 0; q < 4; ++q) {
    const __m512i* a = r + 4 * q;
    const __m512i t0 = _mm512_unpacklo_epi32(a[0], a[1]), t1 = _mm512_unpackhi_epi32(a[0], a[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(a[2], a[3]), t3 = _mm512_unpackhi_epi32(a[2], a[3]);
    u[4 * q + 0] = _mm512_unpacklo_epi64(t0, t2);  // per 128-bit lane L: column 4L + 0
    u[4 * q + 1] = _mm512_unpackhi_epi64(t0, t2);
    u[4 * q + 2] = _mm512_unpacklo_epi64(t1, t3);
    u[4 * q + 3] = _mm512_unpackhi_epi64(t1, t3);
  }
  for (int j = 0; j < 4; ++j) {  // lane L of u[j], u[4 + j], u[8 + j], u[12 + j] into column 4L + j
    const __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44);
    const __m512i v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xee);
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
    const __m512i v3 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xee);
    r[0 + j] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    r[4 + j] = _mm512_shuffle_i32x4(v0, v2, 0xdd);
    r[8 + j] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    r[12 + j] = _mm512_shuffle_i32x4(v1, v3, 0xdd);
  }
}

}  // namespace glm4::kernels
