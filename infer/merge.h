// Fusing LoRA adapters into the base weights (glm4 fuse): W' = W + scale * B A.
#pragma once
#include "base/dtype.h"
#include "model/glm4_model.h"
#include "model/save.h"

namespace glm4 {

// Merges every adapter of `model` into its linear weight, computed in fp32 and rounded once to
// `out_dtype`; the adapters are dropped. Returns the number of modules merged.
int64_t merge_adapters(Glm4Model& model, DType out_dtype);

}  // namespace glm4
