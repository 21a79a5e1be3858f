#include "tests/support/random_adapter.h"

#include <random>

#include "model/adapter/adapter_io.h"
#include "model/glm4_model.h"

namespace glm4::testing {

void write_random_adapter(const std::string& model_dir, const std::filesystem::path& out_dir,
                          const LoraConfig& lora, uint64_t seed, float b_std) {
  std::unique_ptr<Glm4Model> m = load_model(model_dir);
  m->add_lora(lora, seed);
  std::mt19937 rng{uint32_t(seed)};
  std::normal_distribution<float> normal(0.0f, b_std);
  for (auto& [name, t] : m->lora_parameters())
    if (name.ends_with(".lora_B"))
      for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = normal(rng);
  save_adapter(*m, lora, out_dir, "peft", model_dir);
}

}  // namespace glm4::testing
