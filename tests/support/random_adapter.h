// Test helper: a PEFT adapter directory for a model, with random A and B (B = 0, PEFT's
// initialisation, would make every adapter equal the base).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

#include "model/glm4_model.h"
#include "model/lora.h"

namespace glm4::testing {

// Sets every lora_B of `model` to values from N(0, b_std^2): the i-th (in lora_parameters()
// order) drawn by testing::randn with seed + i.
void randomize_lora_b(Glm4Model& model, uint32_t seed, float b_std);

// Writes the adapter of `lora` for the model in `model_dir` to `out_dir`; `b_std` scales B.
void write_random_adapter(const std::string& model_dir, const std::filesystem::path& out_dir,
                          const LoraConfig& lora, uint64_t seed, float b_std = 0.1f);

}  // namespace glm4::testing
