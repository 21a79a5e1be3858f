#include "infer/merge.h"

#include <string>
#include <vector>

#include "base/check.h"

namespace glm4 {

int64_t merge_adapters(Glm4Model& model, DType out_dtype) {
  int64_t merged = 0;
  model.visit_linears([&](const LinearSite&, Linear& linear) {
    if (!linear.lora) return;
    linear.merge_lora(out_dtype);
    ++merged;
  });
  return merged;
}

}  // namespace glm4
