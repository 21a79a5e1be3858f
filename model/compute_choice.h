// The --compute flag: which dtype a model's frozen products run in. `auto` picks bf16 when the
// model's matrices are stored in bf16 (or quantized from bf16: scales in bf16, as mlx writes
// them) and the CPU has native bf16 dot products (AMX or AVX512-BF16), else f32; fp32
// checkpoints always keep the exact fp32 path.
#pragma once
#include <string>

#include "autograd/compute_dtype.h"
#include "model/glm4_model.h"

namespace glm4 {

struct ComputeChoice {
  ComputeDType dtype = ComputeDType::F32;
  std::string kernel = "fp32";  // what runs the frozen products: "amx", "avx512bf16", "fp32"
  std::string describe() const;  // "bf16 (amx)", "f32 (fp32)"
};

// Resolves `flag` ("auto", "f32", "bf16") for `model` and makes it the process's compute dtype.
// Throws glm4::Error naming --compute for another value, or for bf16 on a CPU without native
// bf16 dot products (then auto or f32 is what runs there).
ComputeChoice apply_compute_flag(Glm4Model& model, const std::string& flag);

}  // namespace glm4
