#include "tests/support/random_adapter.h"

#include <algorithm>
#include <vector>

#include "model/adapter/adapter_io.h"
#include "tests/support/random_values.h"

namespace glm4::testing {

void randomize_lora_b(Glm4Model& model, uint32_t seed, float b_std) {
  for (auto& [name, t] : model.lora_parameters())
    if (name.ends_with(".lora_B")) {
      const std::vector<float> v = randn(size_t(t.numel()), seed++, b_std);
      std::copy(v.begin(), v.end(), t.data());
    }
}

void write_random_adapter(const std::string& model_dir, const std::filesystem::path& out_dir,
                          const LoraConfig& lora, uint64_t seed, float b_std) {
  std::unique_ptr<Glm4Model> m = load_model(model_dir);
  m->add_lora(lora, seed);
  randomize_lora_b(*m, uint32_t(seed), b_std);
  save_adapter(*m, lora, out_dir, "peft", model_dir);
}

}  // namespace glm4::testing
