// The one normalized description of a GLM-family model (glm4, glm, chatglm, glm4_moe,
// glm4_moe_lite) that every
// C++ module uses, read from and written back to a Hugging Face config.json.
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/rope_style.h"
#include "base/dtype.h"
#include "model/quant_config.h"

namespace glm4 {

// YaRN RoPE scaling: config.json's rope_scaling (transformers 4) or rope_parameters
// (transformers 5) with rope_type "yarn", as the file gives it. Unset fields take transformers'
// defaults when the frequencies are computed (model/rope_scaling.h).
struct RopeScaling {
  double factor =
      1.0;  // the file's, else max_position_embeddings / original_max_position_embeddings
  std::optional<int64_t> original_max_position_embeddings;  // unset: max_position_embeddings
  std::optional<double> beta_fast, beta_slow;               // unset (or 0): 32 and 1
  std::optional<double> mscale, mscale_all_dim, attention_factor;
  std::optional<bool> truncate;  // unset: true (the correction range is floored / ceiled)
  bool operator==(const RopeScaling&) const = default;

  // The optional numbers by their config.json names, for checking and writing them back.
  std::array<std::pair<const char*, std::optional<double>>, 5> optional_numbers() const {
    return {{{"beta_fast", beta_fast},
             {"beta_slow", beta_slow},
             {"mscale", mscale},
             {"mscale_all_dim", mscale_all_dim},
             {"attention_factor", attention_factor}}};
  }
};

struct ModelConfig {
  // Glm4: GLM-4-0414 (Glm4ForCausalLM, four norms a layer). Glm: glm-4-9b-chat-hf
  // (GlmForCausalLM). ChatGlm: ChatGLM2/3 and the original glm-4-9b-chat (remote code).
  // Glm4Moe: GLM-4.5 / 4.6 / 4.7 (Glm4MoeForCausalLM): two norms a layer, q/k norm, rotate-half
  // RoPE, Mixture-of-Experts MLPs after the first first_k_dense_replace layers.
  // Glm4MoeLite: GLM-4.7-Flash (Glm4MoeLiteForCausalLM): glm4_moe's layers and routing (dropped
  // groups masked to -inf) with DeepSeek-V2 latent attention (the q/kv lora ranks below).
  enum class Family { Glm4, Glm, ChatGlm, Glm4Moe, Glm4MoeLite };

  Family family = Family::Glm4;
  std::string model_type = "glm4";  // the family's Hugging Face model_type
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // the dense MLP width (gate_up_proj has twice this many rows)
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;    // glm4_moe_lite: qk_nope_head_dim + qk_rope_head_dim (q and k heads)
  int64_t rotary_dim = 0;  // leading dims of each head that RoPE rotates (glm4_moe_lite: the last)
  RopeStyle rope_style = RopeStyle::Interleaved;  // rotate-half for glm4_moe
  double rope_theta = 10000.0;
  std::optional<RopeScaling> rope_scaling;  // YaRN; unset: the default RoPE
  double rms_norm_eps = 1.5625e-07;
  bool attention_bias = true;  // bias on q/k/v (never on o_proj)
  bool tie_word_embeddings = false;
  bool post_norms = true;    // post_self_attn_layernorm + post_mlp_layernorm: glm4 only
  bool use_qk_norm = false;  // per-head RMSNorm of q and k before RoPE (glm4_moe)
  // Mixture of Experts (glm4_moe only; zero for the dense families). Layers from
  // first_k_dense_replace on route each token to num_experts_per_tok of n_routed_experts SwiGLU
  // experts of moe_intermediate_size, plus a shared SwiGLU of moe_intermediate_size *
  // n_shared_experts; the router scores n_group groups and keeps topk_group of them.
  int64_t n_routed_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t n_shared_experts = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool norm_topk_prob = false;           // routing weights divided by their sum
  double routed_scaling_factor = 1.0;    // routing weights times this
  int64_t first_k_dense_replace = 0;     // leading layers with a dense SwiGLU MLP
  int64_t num_nextn_predict_layers = 0;  // MTP layers in the files after the last one (unused)
  // Latent attention (glm4_moe_lite only; zero for the other families). q = q_b_proj(
  // q_a_layernorm(q_a_proj(x))) through a q_lora_rank bottleneck (0: the file's null, one
  // q_proj); kv_a_proj_with_mqa(x) gives a kv_lora_rank latent and one shared qk_rope_head_dim
  // rotary key; kv_b_proj expands the latent into qk_nope_head_dim keys and v_head_dim values a
  // head. rope_style Interleaved is the file's rope_interleave true.
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t max_position_embeddings = 0;
  std::vector<int32_t> eos_token_ids;
  std::optional<int32_t> pad_token_id;
  DType torch_dtype = DType::F32;
  // mlx affine quantization (config.json "quantization", else "quantization_config"); a module
  // is stored quantized iff its override says so or, without one, the files hold its scales.
  std::optional<QuantConfig> quantization;
  nlohmann::json raw;  // the file as read, to write back on fuse

  // Equal when they describe the same model: every field above except `raw`, which only
  // records where a config came from.
  bool operator==(const ModelConfig& other) const;
};

// "glm4" / "glm" / "chatglm" / "glm4_moe" / "glm4_moe_lite".
const char* family_name(ModelConfig::Family family);

// Whether `c` routes tokens to experts (glm4_moe and glm4_moe_lite).
bool is_moe_family(const ModelConfig& c);

// Whether `c` uses latent attention (glm4_moe_lite).
bool has_latent_attention(const ModelConfig& c);

// Whether decoder layer `layer` of `c` has a Mixture-of-Experts MLP (glm4_moe and
// glm4_moe_lite, from first_k_dense_replace on).
bool is_moe_layer(const ModelConfig& c, int64_t layer);

// Reads DIR/config.json, or the file itself when given a file. The family comes from
// `architectures` (Glm4ForCausalLM, GlmForCausalLM, ChatGLMModel, ChatGLMForConditionalGeneration,
// Glm4MoeForCausalLM, Glm4MoeLiteForCausalLM) or else `model_type` (glm4, glm, chatglm,
// glm4_moe, glm4_moe_lite). Missing optional fields
// take the defaults of the reference config classes (transformers Glm4Config / GlmConfig /
// Glm4MoeConfig, THUDM ChatGLMConfig). Throws
// glm4::Error naming the file and the field for invalid JSON, missing required fields, wrong
// types and inconsistent values. Unknown fields are ignored.
ModelConfig load_model_config(const std::filesystem::path& model_dir_or_config_json);

// The same from parsed JSON; `source` names the file in error messages.
ModelConfig parse_model_config(const nlohmann::json& j, const std::string& source);

// Throws glm4::Error when `c` is inconsistent (sizes, heads, rotary dims, eps, token ids),
// naming each field by the name the family's config.json uses.
void validate_model_config(const ModelConfig& c, const std::string& source);

// A config.json with the family's real field names. Keys of `c.raw` that this struct does not
// model are kept when `c.raw` is of the same family (keys starting with "_comment" are dropped).
nlohmann::json to_hf_json(const ModelConfig& c);

// Writes DIR/config.json atomically (temporary file in DIR, then rename).
void write_model_config(const ModelConfig& c, const std::filesystem::path& dir);

// The stop set: generation_config.json's eos_token_id when the file has one, else config.json's.
std::vector<int32_t> load_eos_ids(const std::filesystem::path& model_dir);

}  // namespace glm4
