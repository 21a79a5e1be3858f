#include "model/compute_choice.h"

#include "autograd/kernels/cpu_features.h"
#include "autograd/kernels/kernel_selection.h"
#include "autograd/kernels/quant_linear.h"
#include "base/check.h"

namespace glm4 {

namespace {
// Whether a frozen matrix counts as bf16: stored in bf16, or quantized from bf16 (mlx keeps the
// original dtype in the scales and dequantizes to it).
bool bf16_weight(const Weight& w) {
  if (w.empty()) return false;
  return w.is_quantized() ? w.quant().scale_dtype == DType::BF16 : w.dtype() == DType::BF16;
}

// How many of the model's matrix elements (layers' weights and the head) are frozen bf16, and
// how many of those are quantized.
struct Bf16Share {
  int64_t bf16 = 0, quantized_bf16 = 0, other = 0;
};
Bf16Share bf16_share(Glm4Model& model) {
  Bf16Share s;
  model.visit([&](const std::string&, Param& p) {
    if (!p.is_matrix()) return;
    const int64_t n = shape_numel(p.shape);
    if (!bf16_weight(p.frozen)) {
      s.other += n;
      return;
    }
    s.bf16 += n;
    if (p.frozen.is_quantized()) s.quantized_bf16 += n;
  });
  return s;
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
  const bool int8 = quant_int8_available();
  GLM4_CHECK(flag != "bf16" || native || int8,
             "--compute bf16: this CPU has neither native bf16 dot products (AMX or ",
             "AVX512-BF16) nor int8 kernels for quantized weights (AVX512-VNNI or ",
             "AVX2); use --compute auto or f32");
  bool pick_bf16 = flag == "bf16";
  if (flag == "auto") {
    const Bf16Share share = bf16_share(model);
    const int64_t total = share.bf16 + share.other;
    pick_bf16 = native ? 2 * share.bf16 > total : int8 && 2 * share.quantized_bf16 > total;
  }
  ComputeChoice c = kF32Compute;
  if (pick_bf16) {
    c = bf16_compute(kernel);
    if (flag == "auto") c.bf16_max_rows = auto_bf16_max_rows(kernel, kernels::cpu_features().intel);
  }
  model.compute = c;
  return c;
}

}  // namespace glm4
