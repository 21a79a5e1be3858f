// Target attributes for the bf16 kernels: each function that uses AVX-512 / AVX512-BF16
// instructions carries one, so the files compile with any -march and only run where
// cpu_features() found the ISA. (No file-wide pragma: templates from headers must stay generic.)
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#define GLM4_AVX512BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,f16c,bmi,bmi2")))
