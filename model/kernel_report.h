// One record of what runs a model's products: the compute choice and the kernels this process
// selected (autograd/kernels/kernel_selection.h), as a line for logs and as fields for the JSON
// that train, generate, evaluate and classify write.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "autograd/compute_dtype.h"

namespace glm4 {

struct KernelReport {
  ComputeChoice compute;  // dtype, bf16 kernel and row limit of the frozen products
  kernels::Fp32Backend fp32_backend = kernels::Fp32Backend::kOpenBlas;  // runs the fp32 sgemm tiles
  std::string blas_core;     // OpenBLAS's kernel family ("SkylakeX", "Haswell")
  std::string quant_kernel;  // instruction set of the quantized kernels: "avx512", "avx2", "scalar"
  // Decode-sized 4- and 8-bit products on int8 dot products (BF16 compute on an AVX512-VNNI CPU),
  // and prefill-sized ones too where no bf16 units take them (the int8 GEMM).
  bool quant_int8_decode = false;
  bool quant_int8_prefill = false;

  // "compute bf16 (avx512bf16), fp32 openblas (SkylakeX), quantized avx512 + int8 decode"
  std::string describe() const;
  // {"compute", "kernel", "bf16_max_rows" (when it limits the bf16 products), "fp32_backend",
  //  "blas_core" (under openblas), "quant_kernel", "quant_int8_decode", "quant_int8_prefill"}
  nlohmann::json fields() const;
};

// What runs under `compute` in this process. Reads the kernel selection first, so a bad kernel
// override in the environment throws here.
KernelReport kernel_report(const ComputeChoice& compute);

}  // namespace glm4
