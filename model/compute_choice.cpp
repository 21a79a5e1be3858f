#include "model/compute_choice.h"

#include "autograd/kernels/cpu_features.h"
#include "autograd/kernels/kernel_selection.h"
#include "base/check.h"

namespace glm4 {

namespace {
// Whether a frozen matrix counts as bf16: stored in bf16, or quantized from bf16 (mlx keeps the
// original dtype in the scales and dequantizes to it).
bool bf16_weight(const Weight& w) {
  if (w.empty()) return false;
  return w.is_quantized() ? w.quant().scale_dtype == DType::BF16 : w.dtype() == DType::BF16;
}

// True when most of the model's matrix elements are frozen bf16 (the layers' weights and the head).
bool mostly_bf16(Glm4Model& model) {
  int64_t bf16 = 0, other = 0;
  model.visit([&](const std::string&, Param& p) {
    if (!p.is_matrix()) return;
    (bf16_weight(p.frozen) ? bf16 : other) += shape_numel(p.shape);
  });
  return bf16 > other;
}
}  // namespace

int64_t auto_bf16_max_rows(kernels::Bf16Kernel kernel, bool intel) {
  constexpr int64_t kDecodeRows = 4;
  return kernel == kernels::Bf16Kernel::kAvx512Bf16 && intel ? kDecodeRows : kBf16AllRows;
}

ComputeChoice apply_compute_flag(Glm4Model& model, const std::string& flag) {
  GLM4_CHECK(flag == "auto" || flag == "f32" || flag == "bf16", "--compute ", flag,
             ": expected auto, f32 or bf16");
  const kernels::Bf16Kernel kernel = kernels::bf16_kernel();
  const bool native = kernel != kernels::Bf16Kernel::kNone;
  GLM4_CHECK(flag != "bf16" || native,
             "--compute bf16: this CPU has no native bf16 dot products (AMX or ",
             "AVX512-BF16); use --compute auto or f32");
  ComputeChoice c = kF32Compute;
  if (flag == "bf16" || (flag == "auto" && native && mostly_bf16(model))) {
    c = bf16_compute(kernel);
    if (flag == "auto") c.bf16_max_rows = auto_bf16_max_rows(kernel, kernels::cpu_features().intel);
  }
  model.compute = c;
  return c;
}

}  // namespace glm4
