// Consistency checks on a ModelConfig, reported with the field names of the family's config.json.
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>

#include "base/check.h"
#include "model/config.h"
#include "model/config_detail.h"

namespace glm4 {
namespace {

using Family = ModelConfig::Family;

struct FieldNames {
  const char* vocab;
  const char* hidden;
  const char* intermediate;
  const char* layers;
  const char* heads;
  const char* kv_heads;
  const char* head_dim;
  const char* eps;
  const char* max_positions;
};

FieldNames names_for(Family family) {
  if (family == Family::ChatGlm)
    return {"padded_vocab_size", "hidden_size",         "ffn_hidden_size",
            "num_layers",        "num_attention_heads", "multi_query_group_num",
            "kv_channels",       "layernorm_epsilon",   "seq_length"};
  return {"vocab_size",        "hidden_size",         "intermediate_size",
          "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
          "head_dim",          "rms_norm_eps",        "max_position_embeddings"};
}

void check_size(const std::string& src, const char* name, int64_t v) {
  if (v <= 0) fail(src, ": field \"", name, "\" (", v, ") must be positive");
  if (v > std::numeric_limits<int32_t>::max())
    fail(src, ": field \"", name, "\" (", v, ") must be at most ",
         std::numeric_limits<int32_t>::max());
}

void check_token(const std::string& src, const char* name, int32_t id, int64_t vocab,
                 const char* vocab_name) {
  if (id < 0 || id >= vocab)
    fail(src, ": field \"", name, "\" has token id ", id, " outside the vocabulary [0, ", vocab,
         ") of \"", vocab_name, "\"");
}

// The glm4_moe_lite latent attention fields; the other families must leave them at zero.
void validate_latent_fields(const ModelConfig& c, const std::string& src) {
  if (!has_latent_attention(c)) {
    if (c.q_lora_rank != 0 || c.kv_lora_rank != 0 || c.qk_nope_head_dim != 0 ||
        c.qk_rope_head_dim != 0 || c.v_head_dim != 0)
      fail(src, ": latent attention sizes belong to glm4_moe_lite, not the ", family_name(c.family),
           " family");
    return;
  }
  if (c.q_lora_rank != 0) check_size(src, "q_lora_rank", c.q_lora_rank);
  check_size(src, "kv_lora_rank", c.kv_lora_rank);
  check_size(src, "qk_nope_head_dim", c.qk_nope_head_dim);
  check_size(src, "qk_rope_head_dim", c.qk_rope_head_dim);
  check_size(src, "v_head_dim", c.v_head_dim);
  if (c.head_dim != c.qk_nope_head_dim + c.qk_rope_head_dim || c.rotary_dim != c.qk_rope_head_dim)
    fail(src, ": glm4_moe_lite heads are \"qk_nope_head_dim\" (", c.qk_nope_head_dim,
         ") then \"qk_rope_head_dim\" (", c.qk_rope_head_dim, ") rotated dims; got head_dim ",
         c.head_dim, " rotating ", c.rotary_dim);
  if (c.num_key_value_heads != c.num_attention_heads)
    fail(src, ": field \"num_key_value_heads\" (", c.num_key_value_heads,
         ") must equal \"num_attention_heads\" (", c.num_attention_heads,
         "): latent attention expands its keys and values for every head");
  if (c.use_qk_norm) fail(src, ": glm4_moe_lite has no q/k norm (use_qk_norm)");
}

// The glm4_moe / glm4_moe_lite fields; the dense families must leave them at their zero defaults.
void validate_moe_fields(const ModelConfig& c, const std::string& src) {
  const bool moe = is_moe_family(c);
  const RopeStyle style = moe ? RopeStyle::RotateHalf : RopeStyle::Interleaved;
  if (c.rope_style != style && !has_latent_attention(c))
    fail(src, ": the ", family_name(c.family), " family rotates RoPE pairs ",
         moe ? "i and i + rotary_dim / 2 (rotate-half)" : "(2i, 2i + 1) (interleaved)");
  if (!moe) {
    if (c.n_routed_experts != 0 || c.use_qk_norm)
      fail(src, ": experts and q/k norms belong to glm4_moe, not the ", family_name(c.family),
           " family");
    return;
  }
  check_size(src, "n_routed_experts", c.n_routed_experts);
  check_size(src, "moe_intermediate_size", c.moe_intermediate_size);
  check_size(src, "num_experts_per_tok", c.num_experts_per_tok);
  check_size(src, "n_shared_experts", c.n_shared_experts);
  check_size(src, "n_group", c.n_group);
  check_size(src, "topk_group", c.topk_group);
  if (c.n_routed_experts % c.n_group != 0)
    fail(src, ": field \"n_group\" (", c.n_group, ") must divide \"n_routed_experts\" (",
         c.n_routed_experts, ")");
  const int64_t per_group = c.n_routed_experts / c.n_group;
  if (per_group < 2)
    fail(src, ": field \"n_group\" (", c.n_group, ") leaves ", per_group,
         " expert per group of \"n_routed_experts\" (", c.n_routed_experts,
         "); each group is scored by its two best experts");
  if (c.topk_group > c.n_group)
    fail(src, ": field \"topk_group\" (", c.topk_group, ") exceeds \"n_group\" (", c.n_group, ")");
  if (c.num_experts_per_tok > c.topk_group * per_group)
    fail(src, ": field \"num_experts_per_tok\" (", c.num_experts_per_tok, ") exceeds the ",
         c.topk_group * per_group, " experts of the \"topk_group\" (", c.topk_group,
         ") groups kept (", per_group, " experts per group)");
  if (!(c.routed_scaling_factor > 0.0 && std::isfinite(c.routed_scaling_factor)))
    fail(src, ": field \"routed_scaling_factor\" (", c.routed_scaling_factor, ") must be positive");
  if (c.first_k_dense_replace < 0 || c.first_k_dense_replace > c.num_hidden_layers)
    fail(src, ": field \"first_k_dense_replace\" (", c.first_k_dense_replace,
         ") must be in [0, \"num_hidden_layers\" (", c.num_hidden_layers, ")]");
  if (c.num_nextn_predict_layers < 0)
    fail(src, ": field \"num_nextn_predict_layers\" (", c.num_nextn_predict_layers,
         ") must be >= 0");
}

// YaRN (rope_scaling): a positive finite factor and original context, finite betas and scales.
void validate_rope_scaling(const ModelConfig& c, const std::string& src) {
  const RopeScaling& y = *c.rope_scaling;
  if (c.family == Family::ChatGlm) fail(src, ": chatglm configs have no YaRN rope_scaling");
  if (!(y.factor > 0.0 && std::isfinite(y.factor)))
    fail(src, ": field \"rope_scaling.factor\" (", y.factor, ") must be positive");
  if (y.original_max_position_embeddings && *y.original_max_position_embeddings <= 0)
    fail(src, ": field \"rope_scaling.original_max_position_embeddings\" (",
         *y.original_max_position_embeddings, ") must be positive");
  for (const auto& [name, v] : y.optional_numbers())
    if (v && !std::isfinite(*v))
      fail(src, ": field \"rope_scaling.", name, "\" (", *v, ") must be finite");
  if (y.attention_factor && !(*y.attention_factor > 0.0))
    fail(src, ": field \"rope_scaling.attention_factor\" (", *y.attention_factor,
         ") must be positive");
}

}  // namespace

void validate_model_config(const ModelConfig& c, const std::string& src) {
  const FieldNames n = names_for(c.family);
  const bool chatglm = c.family == Family::ChatGlm;
  if (c.model_type != family_name(c.family))
    fail(src, ": model_type \"", c.model_type, "\" does not match the ", family_name(c.family),
         " family");

  check_size(src, n.vocab, c.vocab_size);
  check_size(src, n.hidden, c.hidden_size);
  check_size(src, n.intermediate, c.intermediate_size);
  check_size(src, n.layers, c.num_hidden_layers);
  check_size(src, n.heads, c.num_attention_heads);
  check_size(src, n.kv_heads, c.num_key_value_heads);
  check_size(src, n.head_dim, c.head_dim);
  check_size(src, n.max_positions, c.max_position_embeddings);
  // hidden_size need not equal heads * head_dim (o_proj maps heads * head_dim back to hidden).
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail(src, ": field \"", n.kv_heads, "\" (", c.num_key_value_heads, ") must divide \"", n.heads,
         "\" (", c.num_attention_heads, ")");

  const char* rotary_from =
      chatglm ? "\"kv_channels\" / 2" : "int(\"head_dim\" * \"partial_rotary_factor\")";
  if (c.rotary_dim <= 0)
    fail(src, ": rotary dimension ", c.rotary_dim, " (", rotary_from, ") must be positive");
  if (c.rotary_dim % 2 != 0)
    fail(src, ": rotary dimension ", c.rotary_dim, " (", rotary_from, ", ", n.head_dim, " ",
         c.head_dim, ") must be even: RoPE rotates pairs");
  if (c.rotary_dim > c.head_dim)
    fail(src, ": rotary dimension ", c.rotary_dim, " (", rotary_from, ") exceeds \"", n.head_dim,
         "\" (", c.head_dim, ")");

  if (!(c.rms_norm_eps > 0.0 && c.rms_norm_eps < 1.0))
    fail(src, ": field \"", n.eps, "\" (", c.rms_norm_eps, ") must be in (0, 1)");
  if (!(c.rope_theta > 0.0 && std::isfinite(c.rope_theta))) {
    if (chatglm)
      fail(src, ": field \"rope_ratio\" (", c.rope_theta / config_detail::kChatGlmRopeBase,
           ") must be positive");
    fail(src, ": field \"rope_theta\" (", c.rope_theta, ") must be positive");
  }
  if (c.rope_scaling) validate_rope_scaling(c, src);

  for (int32_t id : c.eos_token_ids) check_token(src, "eos_token_id", id, c.vocab_size, n.vocab);
  if (c.pad_token_id) check_token(src, "pad_token_id", *c.pad_token_id, c.vocab_size, n.vocab);

  if (c.post_norms != (c.family == Family::Glm4))
    fail(src, ": post_norms is ", c.post_norms ? "true" : "false", " but the ",
         family_name(c.family), " family ", c.post_norms ? "has no" : "always has",
         " post_self_attn/post_mlp layer norms");
  validate_moe_fields(c, src);
  validate_latent_fields(c, src);
  if (chatglm && c.tie_word_embeddings)
    fail(src,
         ": tie_word_embeddings must be false for chatglm: its checkpoints keep a separate "
         "transformer.output_layer");
}

}  // namespace glm4
