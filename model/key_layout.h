// Where each of our tensors lives in a family's model files: glm4/glm/glm4_moe use our names
// directly; ChatGLM keeps q|k|v in one query_key_value matrix and uses its own names; mlx-lm's
// glm4_moe and glm4_moe_lite conversions stack each layer's experts into switch_mlp tensors
// [E, out, in] (and split glm4_moe_lite's kv_b_proj, see load_kv_b_split.h). This is
// the one place that knows these layouts, for loading and for writing back.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/tensor.h"
#include "model/config.h"

namespace glm4 {

struct FileSlice {
  std::string key;          // key in the model files
  int64_t row_begin = 0;    // our tensor is rows [row_begin, row_begin + rows) of that tensor
  int64_t total_rows = -1;  // rows of the file tensor; -1 = same as ours (no slicing)
  Shape file_shape = {};    // the file tensor's shape when it is not 2-D (stacked experts)
};

// `name` is our key (model.layers.3.self_attn.q_proj.weight, ...). `stacked_experts`: the files
// hold glm4_moe experts as mlx-lm writes them (mlp.switch_mlp.{gate,up,down}_proj.weight
// [E, out, in]), so expert E's matrix is rows [E * out, (E + 1) * out) of that tensor.
FileSlice file_slice(const ModelConfig& c, const std::string& name, bool stacked_experts = false);

// Whether `key` is one of mlx-lm's stacked expert tensors (mlp.switch_mlp.*).
bool is_stacked_expert_key(const std::string& key);

// Whether `key` is one of mlx-lm's glm4_moe_lite halves of kv_b_proj (self_attn.embed_q.*,
// self_attn.unembed_out.*: model/load_kv_b_split.h rebuilds kv_b_proj from them).
bool is_split_kv_b_key(const std::string& key);

// Keys that a family's checkpoints carry but that hold nothing we use: ChatGLM's RoPE
// frequencies, glm4_moe's multi-token-prediction layers (model.layers.L .. L + MTP - 1).
bool is_ignorable_file_key(const ModelConfig& c, const std::string& key);

// Tensors a family's checkpoints carry that follow from the config rather than training:
// ChatGLM's rotary_pos_emb.inv_freq (a persistent buffer of the reference code, computed at
// base 10000 whatever rope_ratio says). Writers add them so the reference code loads the file.
struct DerivedTensor {
  std::string key;
  std::vector<int64_t> shape;
  std::vector<float> values;
};
std::vector<DerivedTensor> derived_file_tensors(const ModelConfig& c);

// A LoRA module as ChatGLM names it (PEFT adapters of ChatGLM checkpoints use these paths):
// (3, "o_proj") -> "transformer.encoder.layers.3.self_attention.dense"; query_key_value,
// dense_h_to_4h and dense_4h_to_h likewise. q/k/v_proj alone have no ChatGLM path (throws).
std::string chatglm_module_path(int64_t layer, const std::string& name);
// Inverse of chatglm_module_path; false for any other path.
bool parse_chatglm_module_path(const std::string& path, int64_t* layer, std::string* name);

}  // namespace glm4
