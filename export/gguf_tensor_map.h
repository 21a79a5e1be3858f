// Our tensor names -> the GGUF names llama.cpp's converter writes (gguf-py tensor_mapping.py):
// glm4 (GLM-4-0414) keeps q/k/v apart and gets post_attention_norm / post_ffw_norm; chatglm
// (GlmForCausalLM) the same without the post norms; chatglm (ChatGLMModel) one attn_qkv = q|k|v.
// gate_up_proj stays fused as ffn_up ([2 * ff, hidden], gate rows first) in the dense families.
// glm4moe (GLM-4.5/4.6/4.7) has separate ffn_gate / ffn_up, q/k norms, the router, a shared
// expert, and its routed experts stacked into one [experts, out, in] tensor per projection.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "export/gguf_mla.h"
#include "model/config.h"

namespace glm4 {

// "glm4" for the glm4 family, "glm4moe" for glm4_moe, "deepseek2" for glm4_moe_lite; "chatglm" for
// glm (the converter registers GlmForCausalLM with its ChatGLM class) and chatglm.
const char* gguf_arch_name(const ModelConfig& c);

// One GGUF tensor: the rows of `sources` (our names, in order) stacked into `shape` (row-major,
// [rows, cols] or [n]); for glm4_moe's routed experts, expert e's [out, in] weight as slice e of
// [experts, out, in] (sources in expert order). glm4_moe_lite's (deepseek2) attn_k_b / attn_v_b
// and rotate-half q / kv_a rows are `reshape`d from their one source.
struct GgufTensorPlan {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<std::string> sources;
  GgufReshape reshape = GgufReshape::None;
};

// Every tensor of a model of config `c` in the converter's order; `our_names` are the names
// Glm4Model::visit gives, with their shapes. Throws naming a tensor it cannot place.
std::vector<GgufTensorPlan> gguf_tensor_plan(
    const ModelConfig& c, const std::vector<std::pair<std::string, std::vector<int64_t>>>& ours);

// The GGUF name of our linear module's weight ("model.layers.3.mlp.down_proj" ->
// "blk.3.ffn_down.weight") and, for ChatGLM's fused q/k/v, which part (0, 1, 2) it is; part -1
// when the weight maps alone. For a glm4_moe routed expert ("model.layers.1.mlp.experts.7.up_proj"
// -> "blk.1.ffn_up_exps.weight") *expert is set and part is the expert id.
std::string gguf_weight_name(const ModelConfig& c, const std::string& module, int* part,
                             bool* expert = nullptr);

}  // namespace glm4
