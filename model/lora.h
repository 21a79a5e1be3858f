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
// Inverse of lora_module_path, also for glm4_moe's expert paths (model.layers.N.mlp.experts.E.X,
// model.layers.N.mlp.shared_experts.X: name X); false when `path` is not a LoRA-capable module
// of a decoder layer.
bool parse_lora_module_path(const std::string& path, int64_t* layer, std::string* name);
// Expands "all-linear", maps ChatGLM's names (dense, dense_h_to_4h, dense_4h_to_h) to ours,
// checks every name and returns them in canonical order; throws naming an unknown module or
// query_key_value given together with q_proj, k_proj or v_proj. With `moe` the names are
// glm4_moe's (moe_lora_target_names()); with `latent_attention` too (glm4_moe_lite) "all-linear"
// means its attention projections (q_proj or q_a_proj + q_b_proj, kv_a_proj_with_mqa, kv_b_proj,
// o_proj) besides the MLPs'.
std::vector<std::string> resolve_lora_targets(const std::vector<std::string>& targets,
                                              bool moe = false, bool latent_attention = false);

// glm4_moe's LoRA targets, in canonical order: the attention projections and gate_proj, up_proj,
// down_proj (every MLP linear: dense layers, shared and routed experts), then qualified names
// that narrow an MLP projection to one kind, as PEFT's suffix matching reads them:
// "mlp.gate_proj" (the dense layers' MLP), "shared_experts.gate_proj", and "experts.gate_proj"
// (every routed expert, mlp.experts.E.gate_proj; PEFT needs a regular expression for this one).
// "experts" and "shared_experts" stand for their three projections, "self_attn.q_proj" for
// q_proj; "all-linear" is every linear but the router and lm_head, as in PEFT. The router
// (mlp.gate) is no linear layer and cannot be a target. glm4_moe_lite's latent attention
// projections (q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj) come last.
const std::vector<std::string>& moe_lora_target_names();
// Whether a target list names glm4_moe's own modules (gate_proj, up_proj, experts, ...) or
// glm4_moe_lite's latent attention projections.
bool names_moe_targets(const std::vector<std::string>& targets);
// Whether resolved target `target` adapts the linear at `path` (a module path as
// Glm4Model::visit_linears gives it, e.g. model.layers.3.mlp.experts.7.up_proj).
bool lora_target_matches(const std::string& target, const std::string& path);
// The kind-qualified target of a glm4_moe MLP module path (model.layers.3.mlp.experts.7.up_proj
// -> "experts.up_proj", ...mlp.shared_experts.up_proj -> "shared_experts.up_proj",
// ...mlp.up_proj -> "mlp.up_proj"); an attention path gives its own name ("q_proj").
std::string qualified_lora_target(const std::string& path);
// Whether `path` is one of glm4_moe's MLP module paths (gate_proj or up_proj, or inside
// shared_experts or experts).
bool is_moe_module_path(const std::string& path);
// Whether `path` ends in one of glm4_moe_lite's latent attention projections (q_a_proj, ...).
bool is_latent_attention_path(const std::string& path);
// ChatGLM's own name for a target (dense for o_proj, ...); others are returned unchanged.
std::string chatglm_target_name(const std::string& name);

}  // namespace glm4
