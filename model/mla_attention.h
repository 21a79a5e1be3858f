// GLM-4.7-Flash's latent attention (DeepSeek-V2 MLA, glm4_moe_lite): q through an optional
// q_lora_rank bottleneck; keys and values expanded per head by kv_b_proj from a normed
// kv_lora_rank latent, plus one rotary key shared by all heads; RoPE on the qk_rope_head_dim tail
// of each q/k head; scale (qk_nope + qk_rope)^-0.5, times YaRN's mscale^2 when rope scaling sets
// mscale_all_dim. A KV cache holds only the latent and the rotated shared key of each token
// (kv_lora_rank + qk_rope_head_dim values a layer).
#pragma once
#include <optional>
#include <utility>

#include "autograd/attention_mask.h"
#include "model/config.h"
#include "model/linear.h"
#include "model/rms_norm.h"

namespace glm4 {

struct ForwardContext;
struct CachedRows;

class MlaAttention {
 public:
  explicit MlaAttention(const ModelConfig& c);
  // [B, T, hidden]; with `rows` (B = 1) every row attends to its own latent cache.
  Tensor forward(const Tensor& x, const ForwardContext& ctx, CachedRows* rows = nullptr) const;
  void visit(const std::string& prefix, const ParamVisitor& fn);
  void visit_linears(const std::string& prefix, int64_t layer, const LinearVisitor& fn);

  // Values a token keeps in the cache per layer: the latent and the shared rotary key.
  int64_t cache_width() const { return kv_lora_rank + rope_dim; }

  int64_t heads, q_lora_rank, kv_lora_rank, nope_dim, rope_dim, v_dim;
  RopeFrequencies rope;  // the config's (default or YaRN)
  double score_mscale;   // YaRN's mscale(factor, mscale_all_dim)^2 on the softmax scale, else 1
  RopeStyle rope_style;
  std::optional<Linear> q_proj;              // [heads * (nope + rope), hidden] without q lora
  std::optional<Linear> q_a_proj, q_b_proj;  // [q_lora, hidden], [heads * (nope + rope), q_lora]
  std::optional<RmsNorm> q_a_layernorm;      // [q_lora], eps 1e-6
  Linear kv_a_proj_with_mqa;                 // [kv_lora + rope, hidden]
  RmsNorm kv_a_layernorm;                    // [kv_lora], eps 1e-6
  Linear kv_b_proj;                          // [heads * (nope + v), kv_lora]
  Linear o_proj;                             // [hidden, heads * v]

 private:
  // Per-head keys [B, S, H, nope + rope] and values [B, S, H, v] from latents [B, S, kv_lora]
  // and rotated shared keys [B, S, 1, rope].
  std::pair<Tensor, Tensor> expand(const Tensor& latent, const Tensor& k_rot,
                                   const ForwardContext& ctx) const;
  // q [B, T, H, nope + rope] against the expanded keys and values -> [B, T, H, v].
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const ForwardContext& ctx,
                const AttentionMask& mask) const;
  // The rows of a cached forward, each against its cache of packed [latent | k_rot] tokens.
  Tensor attend_cached(const Tensor& q, const Tensor& latent, const Tensor& k_rot,
                       const ForwardContext& ctx, CachedRows& rows) const;
};

}  // namespace glm4
