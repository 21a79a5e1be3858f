#include "model/glm4_attention.h"

#include <cmath>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "base/check.h"
#include "model/forward_context.h"
#include "model/kv_cache.h"
#include "model/rope_scaling.h"

namespace glm4 {

Glm4Attention::Glm4Attention(const ModelConfig& c)
    : heads(c.num_attention_heads),
      kv_heads(c.num_key_value_heads),
      head_dim(c.head_dim),
      rotary_dim(c.rotary_dim),
      rope(rope_frequencies(c)),
      rope_style(c.rope_style),
      q_proj(c.hidden_size, heads * head_dim, c.attention_bias, 0),
      k_proj(c.hidden_size, kv_heads * head_dim, c.attention_bias, 1),
      v_proj(c.hidden_size, kv_heads * head_dim, c.attention_bias, 2),
      o_proj(heads * head_dim, c.hidden_size, false, 3) {
  if (c.use_qk_norm) {
    q_norm.emplace(head_dim, c.rms_norm_eps);
    k_norm.emplace(head_dim, c.rms_norm_eps);
  }
}

Tensor Glm4Attention::forward(const Tensor& x, const ForwardContext& ctx, CachedRows* rows) const {
  const int64_t B = ctx.batch, T = ctx.seq;
  const Linear* const projections[] = {&q_proj, &k_proj, &v_proj};
  std::vector<Tensor> qkv = forward_each(projections, x, ctx);
  Tensor q = ops::reshape(qkv[0], {B, T, heads, head_dim});
  Tensor k = ops::reshape(qkv[1], {B, T, kv_heads, head_dim});
  Tensor v = ops::reshape(qkv[2], {B, T, kv_heads, head_dim});
  if (q_norm) {
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  q = ops::rope(q, ctx.positions, rope, rope_style);
  k = ops::rope(k, ctx.positions, rope, rope_style);
  Tensor out =
      rows ? attend_cached(q, k, v, ctx, *rows) : ops::attention(q, k, v, ctx.mask, ctx.compute);
  return o_proj.forward(ops::reshape(out, {B, T, heads * head_dim}), ctx);
}

Tensor Glm4Attention::attend_cached(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const ForwardContext& ctx, CachedRows& rows) const {
  GLM4_CHECK(!GradMode::enabled() || !q.requires_grad(),
             "[attention] KV caches are for inference; run it under NoGradGuard");
  const size_t R = rows.caches.size();
  GLM4_CHECK(q.dim(0) == 1 && rows.offsets.size() == R + 1 && rows.offsets.front() == 0 &&
                 rows.offsets.back() == q.dim(1),
             "[attention] ", R, " cached rows with offsets ending at ", rows.offsets.back(),
             " for q ", shape_str(q.shape()));
  std::vector<Tensor> outs;
  for (size_t r = 0; r < R; ++r) {
    const int64_t begin = rows.offsets[r], end = rows.offsets[r + 1];
    auto part = [&](const Tensor& t) { return R == 1 ? t : ops::slice(t, 1, begin, end); };
    const auto [keys, values] = rows.caches[r]->append(ctx.layer_index, part(k), part(v));
    AttentionMask mask;
    mask.q_offset = keys.tokens - (end - begin);  // the row's new tokens follow what it cached
    outs.push_back(keys.bf16 ? ops::attention_bf16_kv(part(q), keys.bf16, values.bf16, keys.tokens,
                                                      kv_heads, mask, ctx.compute)
                             : ops::attention(part(q), keys.f32, values.f32, mask, ctx.compute));
  }
  return R == 1 ? outs[0] : ops::concat(outs, 1);
}

void Glm4Attention::visit(const std::string& prefix, const ParamVisitor& fn) {
  q_proj.visit(prefix + ".q_proj", fn);
  k_proj.visit(prefix + ".k_proj", fn);
  v_proj.visit(prefix + ".v_proj", fn);
  o_proj.visit(prefix + ".o_proj", fn);
  if (q_norm) {
    q_norm->visit(prefix + ".q_norm", fn);
    k_norm->visit(prefix + ".k_norm", fn);
  }
}

void Glm4Attention::visit_linears(const std::string& prefix, int64_t layer,
                                  const LinearVisitor& fn) {
  for (auto [name, linear] : {std::pair{"q_proj", &q_proj},
                              {"k_proj", &k_proj},
                              {"v_proj", &v_proj},
                              {"o_proj", &o_proj}})
    fn({prefix + "." + name, layer, name}, *linear);
}

}  // namespace glm4
