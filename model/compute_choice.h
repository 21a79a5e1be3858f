// The --compute flag: which dtype a model's frozen products run in. `auto` picks bf16 when the
// model's matrices are stored in bf16 (or quantized from bf16: scales in bf16, as mlx writes
// them) and the CPU has native bf16 dot products (AMX or AVX512-BF16; see auto_bf16_max_rows for
// which product sizes), else f32; fp32 checkpoints always keep the exact fp32 path.
// On a CPU with AVX512-VNNI but no bf16 units (Cascade Lake, Ice Lake), bf16 compute runs every
// product on the fp32 kernels except decode-sized quantized ones, which take the int8 dot
// products (quant_linear.h); `auto` picks it there when most of the matrices are quantized.
#pragma once
#include <string>

#include "autograd/compute_dtype.h"
#include "model/glm4_model.h"
#include "model/kernel_report.h"

namespace glm4 {

// The bf16_max_rows `auto` sets for `kernel`: every product on AMX, and on AVX512-BF16 where that
// is not an Intel CPU's; on Intel's AVX512-BF16 alone only decode sizes (up to 4 rows), where
// reading half the weight bytes is what counts: there its bf16 dot products are no faster than
// two fp32 FMAs, so larger products run 1.6x faster on the fp32 path (benchmarks/README).
int64_t auto_bf16_max_rows(kernels::Bf16Kernel kernel, bool intel);

// Resolves `flag` ("auto", "f32", "bf16") for `model` and makes it the model's compute choice
// (model.compute), which it returns. Throws glm4::Error naming --compute for another value, or
// for bf16 on a CPU with neither bf16 units nor AVX512-VNNI (then auto or f32 is what runs there).
ComputeChoice apply_compute_flag(Glm4Model& model, const std::string& flag);

}  // namespace glm4
