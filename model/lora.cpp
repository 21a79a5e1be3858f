#include "model/lora.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace glm4 {

double LoraConfig::scale() const {
  return use_rslora ? alpha / std::sqrt(double(rank)) : alpha / double(rank);
}

const std::vector<std::string>& lora_module_names() {
  static const std::vector<std::string> names{"q_proj", "k_proj", "v_proj", "o_proj",
                                              "gate_up_proj", "down_proj"};
  return names;
}

std::vector<std::string> resolve_lora_targets(const std::vector<std::string>& targets) {
  std::vector<std::string> out;
  for (const std::string& t : targets) {
    if (t == "all-linear") {
      for (const std::string& n : lora_module_names())
        if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
      continue;
    }
    const auto& names = lora_module_names();
    if (std::find(names.begin(), names.end(), t) == names.end()) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      fail("unknown LoRA target module \"", t, "\"; known: ", known, ", all-linear");
    }
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  GLM4_CHECK(!out.empty(), "no LoRA target modules given");
  return out;
}

}  // namespace glm4
