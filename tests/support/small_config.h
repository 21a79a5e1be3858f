// Test helper: the smallest GLM-4-0414 config.json the config tests start from and edit.
#pragma once
#include <nlohmann/json.hpp>

namespace glm4::testing {

// glm4: vocab 1000, hidden 64, MLP 96, 2 layers, 4 query heads sharing 2 kv heads of 16, eos 3,
// pad 0; everything else at its default.
inline nlohmann::json small_glm4_config() {
  return nlohmann::json::parse(R"({
    "architectures": ["Glm4ForCausalLM"], "model_type": "glm4", "vocab_size": 1000,
    "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "eos_token_id": 3,
    "pad_token_id": 0})");
}

}  // namespace glm4::testing
