// LoRA settings (PEFT semantics): which linear modules get adapters and how they are scaled.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace glm4 {

struct LoraConfig {
  int64_t rank = 8;
  double alpha = 16;
  double dropout = 0.0;
  bool use_rslora = false;
  std::vector<std::string> targets{"q_proj", "k_proj", "v_proj", "o_proj"};
  int64_t num_layers = -1;  // adapt only the last N decoder layers; -1 = all

  // alpha / r, or alpha / sqrt(r) with rsLoRA.
  double scale() const;
};

// The module names a target list may hold; "all-linear" expands to all of them.
const std::vector<std::string>& lora_module_names();
// The module of a decoder layer that holds a LoRA-capable linear: "self_attn" for q/k/v/o_proj,
// "mlp" for gate_up_proj and down_proj.
const char* lora_module_parent(const std::string& name);
// "model.layers.{layer}.{parent}.{name}", the path Glm4Model::visit_linears gives that linear.
std::string lora_module_path(int64_t layer, const std::string& name);
// Inverse of lora_module_path; false when `path` is not a LoRA-capable linear of a decoder layer.
bool parse_lora_module_path(const std::string& path, int64_t* layer, std::string* name);
// Expands "all-linear" and checks every name; throws naming an unknown module.
std::vector<std::string> resolve_lora_targets(const std::vector<std::string>& targets);

}  // namespace glm4
