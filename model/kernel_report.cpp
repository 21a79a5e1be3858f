// The kernel report: read from the kernel selection, written as a line or JSON fields.
#include "model/kernel_report.h"

#include "autograd/kernels/gemm.h"
#include "autograd/kernels/kernel_selection.h"
#include "autograd/kernels/quant_linear.h"

namespace glm4 {

KernelReport kernel_report(const ComputeChoice& compute) {
  const kernels::KernelSelection& selected = kernels::kernel_selection();
  KernelReport r;
  r.compute = compute;
  r.fp32_backend = selected.fp32;
  const char* core = blas_core_name();
  r.blas_core = core != nullptr ? core : "unknown";
  r.quant_kernel = quant_kernel_name();
  r.quant_int8_decode = linear_forward_uses_int8(1, compute);
  r.quant_int8_prefill = linear_forward_uses_int8(kBf16AllRows, compute);  // the largest prefill
  return r;
}

std::string KernelReport::describe() const {
  std::string text =
      "compute " + compute.describe() + ", fp32 " + kernels::fp32_backend_name(fp32_backend);
  if (fp32_backend == kernels::Fp32Backend::kOpenBlas) text += " (" + blas_core + ")";
  text += ", quantized " + quant_kernel;
  if (quant_int8_decode)
    text += quant_int8_prefill ? " + int8 decode and prefill" : " + int8 decode";
  return text;
}

nlohmann::json KernelReport::fields() const {
  nlohmann::json j = {{"compute", compute_dtype_name(compute.dtype)},
                      {"kernel", compute.kernel_name()}};
  if (compute.limits_rows()) j["bf16_max_rows"] = compute.bf16_max_rows;
  j["fp32_backend"] = kernels::fp32_backend_name(fp32_backend);
  if (fp32_backend == kernels::Fp32Backend::kOpenBlas) j["blas_core"] = blas_core;
  j["quant_kernel"] = quant_kernel;
  j["quant_int8_decode"] = quant_int8_decode;
  j["quant_int8_prefill"] = quant_int8_prefill;
  return j;
}

}  // namespace glm4
