// Writes a ModelConfig back as the config.json its family's checkpoints carry (real field names),
// keeping the keys of the original file that ModelConfig does not model.
#include <cmath>
#include <cstdio>
#include <optional>
#include <utility>

#include "base/check.h"
#include "io/file/atomic_file.h"
#include "model/config.h"
#include "model/config_detail.h"

namespace glm4 {
namespace fs = std::filesystem;
using json = nlohmann::json;
using Family = ModelConfig::Family;

namespace {

const char* dtype_torch_name(DType d) {
  switch (d) {
    case DType::F32:
      return "float32";
    case DType::BF16:
      return "bfloat16";
    case DType::F16:
      return "float16";
  }
  return "float32";
}

json token_ids_json(const std::vector<int32_t>& ids) {
  if (ids.empty()) return nullptr;
  if (ids.size() == 1) return ids[0];
  return ids;
}

// The keys of `raw` worth keeping: only when it describes the same family, never comments.
json carried_over(const ModelConfig& c) {
  json j = json::object();
  if (config_detail::family_of(c.raw) != c.family) return j;
  for (auto it = c.raw.begin(); it != c.raw.end(); ++it) {
    if (it.key().rfind("_comment", 0) == 0) continue;
    if (it.key() == "quantization" || it.key() == "quantization_config") continue;  // c says
    j[it.key()] = it.value();
  }
  return j;
}

void set_default(json& j, const char* key, json value) {
  if (!j.contains(key)) j[key] = std::move(value);
}

// glm4_moe_lite's own fields. transformers reads "head_dim" as qk_rope_head_dim, so it is
// never written; the rotary factor is the whole rotary part.
void write_latent_fields(const ModelConfig& c, json& j) {
  j.erase("head_dim");
  j.erase("mlp_layer_types");  // first_k_dense_replace says it
  j["partial_rotary_factor"] = 1.0;
  j["q_lora_rank"] = c.q_lora_rank > 0 ? json(c.q_lora_rank) : json(nullptr);
  j["kv_lora_rank"] = c.kv_lora_rank;
  j["qk_nope_head_dim"] = c.qk_nope_head_dim;
  j["qk_rope_head_dim"] = c.qk_rope_head_dim;
  j["v_head_dim"] = c.v_head_dim;
  j["rope_interleave"] = c.rope_style == RopeStyle::Interleaved;
  set_default(j, "topk_method", "noaux_tc");
}

// YaRN as transformers 4 and 5 both read it: rope_scaling with rope_type "yarn" and the fields
// the file gave (the factor always, resolved).
json rope_scaling_json(const RopeScaling& y) {
  json j = {{"rope_type", "yarn"}, {"factor", y.factor}};
  if (y.original_max_position_embeddings)
    j["original_max_position_embeddings"] = *y.original_max_position_embeddings;
  for (const auto& [name, v] : y.optional_numbers())
    if (v) j[name] = *v;
  if (y.truncate) j["truncate"] = *y.truncate;
  return j;
}

json glm_json(const ModelConfig& c) {
  json j = carried_over(c);
  // A factor whose int(head_dim * factor) gives back rotary_dim, exactly as transformers computes
  // it.
  double factor = double(c.rotary_dim) / double(c.head_dim);
  if (int64_t(double(c.head_dim) * factor) != c.rotary_dim)
    fail("to_hf_json: rotary_dim ", c.rotary_dim,
         " cannot be written as a partial_rotary_factor of head_dim ", c.head_dim);
  const bool lite = c.family == Family::Glm4MoeLite;
  const bool moe = c.family == Family::Glm4Moe || lite;
  if (c.eos_token_ids.empty() && !moe)
    fail("to_hf_json: ", c.model_type,
         " needs eos_token_id: transformers replaces an empty one with ",
         "its default [151329, 151336, 151338]");
  // One place for each setting: top-level keys, read by transformers 4 and 5 alike.
  j.erase("rope_parameters");
  j.erase("rope_scaling");
  if (c.rope_scaling) j["rope_scaling"] = rope_scaling_json(*c.rope_scaling);
  j.erase("dtype");
  j["architectures"] = json::array({c.family == Family::Glm4      ? "Glm4ForCausalLM"
                                    : c.family == Family::Glm4Moe ? "Glm4MoeForCausalLM"
                                    : lite                        ? "Glm4MoeLiteForCausalLM"
                                                                  : "GlmForCausalLM"});
  j["model_type"] = c.model_type;
  j["attention_bias"] = c.attention_bias;
  j["eos_token_id"] = token_ids_json(c.eos_token_ids);
  j["head_dim"] = c.head_dim;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["pad_token_id"] = c.pad_token_id ? json(*c.pad_token_id) : json(nullptr);
  j["partial_rotary_factor"] = factor;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = dtype_torch_name(c.torch_dtype);
  j["vocab_size"] = c.vocab_size;
  j["hidden_act"] = "silu";
  set_default(j, "attention_dropout", 0.0);
  set_default(j, "initializer_range", 0.02);
  set_default(j, "use_cache", true);
  if (lite) write_latent_fields(c, j);
  if (moe) {
    if (!lite) j["use_qk_norm"] = c.use_qk_norm;
    j["n_routed_experts"] = c.n_routed_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["n_shared_experts"] = c.n_shared_experts;
    j["n_group"] = c.n_group;
    j["topk_group"] = c.topk_group;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["routed_scaling_factor"] = c.routed_scaling_factor;
    j["first_k_dense_replace"] = c.first_k_dense_replace;
    j["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
  }
  // The first releases with these classes: glm in 4.46, glm4 (GLM-4-0414) in 4.51, glm4_moe
  // (GLM-4.5) in 4.54, glm4_moe_lite (GLM-4.7-Flash) in 5.0.
  set_default(j, "transformers_version",
              c.family == Family::Glm4      ? "4.51.3"
              : c.family == Family::Glm4Moe ? "4.54.0"
              : lite                        ? "5.0.0"
                                            : "4.46.0");
  if (c.quantization) {  // as mlx-lm writes it: both keys, the same object
    j["quantization"] = quant_config_json(*c.quantization);
    j["quantization_config"] = j["quantization"];
  }
  return j;
}

json chatglm_json(const ModelConfig& c) {
  if (c.quantization) fail("to_hf_json: quantized chatglm models cannot be written");
  json j = carried_over(c);
  if (c.rotary_dim != c.head_dim / 2 || c.head_dim % 2 != 0)
    fail("to_hf_json: chatglm always rotates kv_channels / 2 dims; rotary_dim ", c.rotary_dim,
         " with head_dim ", c.head_dim, " cannot be written");
  double ratio = c.rope_theta / config_detail::kChatGlmRopeBase;
  if (config_detail::kChatGlmRopeBase * ratio != c.rope_theta)
    fail("to_hf_json: rope_theta ", c.rope_theta,
         " is not 10000 * rope_ratio for any representable rope_ratio");
  json ratio_json = ratio;
  if (ratio == std::floor(ratio) && ratio < 9.0e15)
    ratio_json = int64_t(ratio);  // 500, as THUDM writes it
  bool mqa = c.num_key_value_heads != c.num_attention_heads ||
             (j.contains("multi_query_attention") && j["multi_query_attention"] == true);
  bool arch_ok = false;
  if (auto a = j.find("architectures"); a != j.end() && a->is_array()) {
    for (const json& e : *a)
      arch_ok |= e == "ChatGLMModel" || e == "ChatGLMForConditionalGeneration";
  }
  if (!arch_ok) j["architectures"] = json::array({"ChatGLMModel"});
  j["model_type"] = c.model_type;
  j["add_bias_linear"] = false;
  j["add_qkv_bias"] = c.attention_bias;
  j["apply_residual_connection_post_layernorm"] = false;
  j["ffn_hidden_size"] = c.intermediate_size;
  j["hidden_size"] = c.hidden_size;
  j["kv_channels"] = c.head_dim;
  j["layernorm_epsilon"] = c.rms_norm_eps;
  j["multi_query_attention"] = mqa;
  j["multi_query_group_num"] = c.num_key_value_heads;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_layers"] = c.num_hidden_layers;
  if (j.contains("num_hidden_layers"))
    j["num_hidden_layers"] = c.num_hidden_layers;  // glm-4-9b-chat has both
  if (j.contains("vocab_size")) j["vocab_size"] = c.vocab_size;
  j["original_rope"] = true;
  j["padded_vocab_size"] = c.vocab_size;
  j["post_layer_norm"] = true;
  j["rmsnorm"] = true;
  j["rope_ratio"] = ratio_json;
  j["seq_length"] = c.max_position_embeddings;
  j["tie_word_embeddings"] = false;
  j["torch_dtype"] = dtype_torch_name(c.torch_dtype);
  j.erase("dtype");
  j["eos_token_id"] = token_ids_json(c.eos_token_ids);
  j["pad_token_id"] = c.pad_token_id ? json(*c.pad_token_id) : json(nullptr);
  set_default(j, "transformers_version", "4.30.2");
  return j;
}

}  // namespace

json to_hf_json(const ModelConfig& c) {
  validate_model_config(c, "to_hf_json");
  return c.family == Family::ChatGlm ? chatglm_json(c) : glm_json(c);
}

void write_model_config(const ModelConfig& c, const fs::path& dir) {
  const std::string text = to_hf_json(c).dump(2) + "\n";  // validates before anything is created
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail(dir.string(), ": cannot create directory: ", ec.message());
  write_file_atomic(dir / "config.json", text);
}

}  // namespace glm4
