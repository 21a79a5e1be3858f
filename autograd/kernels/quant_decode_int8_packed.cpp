// The int8 decode kernel for 2-, 3-, 5- and 6-bit codes: the 8-bit kernel's steps on codes spread
// to bytes by AVX512-VBMI (quant_decode_int8_rows.h). Compiled for VBMI on top of the int8
// kernel's AVX-512 VNNI: called only where int8_supported said yes (a CPU with both).
#include "autograd/kernels/quant_decode_int8.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,f16c")
#include "autograd/kernels/quant_decode_int8_rows.h"
#include "autograd/kernels/quant_simd.h"

namespace glm4::quant_detail {

void int8_decode_rows_packed(const QuantizedMatrix& W, const Int8DecodeInput& in, int64_t m0,
                             int64_t M, int64_t n0, int64_t n1, float* Y, int64_t ldy,
                             bool accumulate) {
  switch (W.bits) {
    case 2:
      return rows_bits<2>(W, in, m0, M, n0, n1, Y, ldy, accumulate);
    case 3:
      return rows_bits<3>(W, in, m0, M, n0, n1, Y, ldy, accumulate);
    case 5:
      return rows_bits<5>(W, in, m0, M, n0, n1, Y, ldy, accumulate);
    case 6:
      return rows_bits<6>(W, in, m0, M, n0, n1, Y, ldy, accumulate);
  }
}

}  // namespace glm4::quant_detail

#pragma GCC pop_options
