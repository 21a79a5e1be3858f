// The compute choice's names, for logs and metrics.
#include "autograd/compute_dtype.h"

namespace glm4 {

const char* compute_dtype_name(ComputeDType dtype) {
  return dtype == ComputeDType::BF16 ? "bf16" : "f32";
}

const char* ComputeChoice::kernel_name() const {
  return bf16_units_on() ? kernels::bf16_kernel_name(kernel) : "fp32";
}

std::string ComputeChoice::describe() const {
  std::string text = std::string(compute_dtype_name(dtype)) + " (" + kernel_name();
  if (limits_rows())
    text.append(", fp32 over ").append(std::to_string(bf16_max_rows)).append(" rows");
  return text + ")";
}

}  // namespace glm4
