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
  // DoRA (PEFT use_dora, mlx-lm fine_tune_type "dora"): a trainable magnitude per output row.
  bool dora = false;
  std::vector<std::string> targets{"q_proj", "k_proj", "v_proj", "o_proj"};
  int64_t num_layers = -1;  // adapt only the last N decoder layers; -1 = all

  // alpha / r, or alpha / sqrt(r) with rsLoRA.
  double scale() const;
};

// The fused target of ChatGLM checkpoints: q_proj, k_proj and v_proj adapted by one A [r, hidden]
// and one B [q + k + v rows, r] over their concatenated output, as PEFT adapts ChatGLM's
// query_key_value. Excludes the separate q/k/v targets.
inline constexpr const char* kFusedQkv = "query_key_value";

// The module names a target list may hold, in canonical order; "all-linear" expands to the
// separate ones (every name but query_key_value).
const std::vector<std::string>& lora_module_names();
// The linear layers one target adapts: q/k/v for query_key_value, else the target itself.
std::vector<std::string> lora_target_linears(const std::string& target);
// The module of a decoder layer that holds a LoRA-capable linear: "self_attn" for q/k/v/o_proj
// and query_key_value, "mlp" for gate_up_proj and down_proj.
const char* lora_module_parent(const std::string& name);
// "model.layers.{layer}.{parent}.{name}", the path Glm4Model::visit_linears gives that linear
// (for query_key_value, the path adapter files use for the fused module).
std::string lora_module_path(int64_t layer, const std::string& name);
// Inverse of lora_module_path; false when `path` is not a LoRA-capable module of a decoder layer.
bool parse_lora_module_path(const std::string& path, int64_t* layer, std::string* name);
// Expands "all-linear", maps ChatGLM's names (dense, dense_h_to_4h, dense_4h_to_h) to ours,
// checks every name and returns them in canonical order; throws naming an unknown module or
// query_key_value given together with q_proj, k_proj or v_proj.
std::vector<std::string> resolve_lora_targets(const std::vector<std::string>& targets);
// ChatGLM's own name for a target (dense for o_proj, ...); others are returned unchanged.
std::string chatglm_target_name(const std::string& name);

}  // namespace glm4
