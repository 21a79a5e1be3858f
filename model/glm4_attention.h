// GLM attention: q/k/v projections (bias per config), glm4_moe's optional per-head q/k RMSNorm,
// partial RoPE (interleaved, or rotate-half for glm4_moe), GQA, o_proj.
#pragma once
#include <optional>

#include "model/config.h"
#include "model/linear.h"
#include "model/rms_norm.h"

namespace glm4 {

struct ForwardContext;
struct CachedRows;

class Glm4Attention {
 public:
  explicit Glm4Attention(const ModelConfig& c);
  // [B, T, hidden]; with `rows` (B = 1) every row attends to its own KV cache.
  Tensor forward(const Tensor& x, const ForwardContext& ctx, CachedRows* rows = nullptr) const;
  void visit(const std::string& prefix, const ParamVisitor& fn);
  void visit_linears(const std::string& prefix, int64_t layer, const LinearVisitor& fn);

  int64_t heads, kv_heads, head_dim, rotary_dim;
  RopeFrequencies rope;  // the config's (default or YaRN)
  RopeStyle rope_style;
  Linear q_proj, k_proj, v_proj, o_proj;
  std::optional<RmsNorm> q_norm, k_norm;  // [head_dim] each, when use_qk_norm

 private:
  // q [1, N, Hq, D], k, v [1, N, Hkv, D] of rows laid end to end -> [1, N, Hq, D], into the
  // caches of layer ctx.layer_index.
  Tensor attend_cached(const Tensor& q, const Tensor& k, const Tensor& v, const ForwardContext& ctx,
                       CachedRows& rows) const;
};

}  // namespace glm4
