#include "infer/merge.h"

#include <string>
#include <vector>

#include "base/check.h"

namespace glm4 {

int64_t merge_adapters(Glm4Model& model, DType out_dtype) {
  std::vector<std::string> modules;
  model.visit_lora([&](const std::string& module, const char* which, Tensor&) {
    if (std::string(which) == "lora_A") modules.push_back(module);
  });
  for (const std::string& path : modules) {
    Linear* linear = model.find_linear(path);
    GLM4_CHECK(linear && linear->lora, "[merge] no adapted module at ", path);
    linear->merge_lora(out_dtype);
  }
  return int64_t(modules.size());
}

}  // namespace glm4
