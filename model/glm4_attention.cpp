#include "model/glm4_attention.h"

#include <cmath>

#include "base/check.h"
#include "autograd/kernels/attention.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "model/forward_context.h"
#include "model/kv_cache.h"

namespace glm4 {

Glm4Attention::Glm4Attention(const ModelConfig& c)
    : heads(c.num_attention_heads), kv_heads(c.num_key_value_heads), head_dim(c.head_dim),
      rotary_dim(c.rotary_dim), rope_theta(c.rope_theta),
      q_proj(c.hidden_size, heads * head_dim, c.attention_bias, 0),
      k_proj(c.hidden_size, kv_heads * head_dim, c.attention_bias, 1),
      v_proj(c.hidden_size, kv_heads * head_dim, c.attention_bias, 2),
      o_proj(heads * head_dim, c.hidden_size, false, 3) {}

Tensor Glm4Attention::forward(const Tensor& x, const ForwardContext& ctx) const {
  const int64_t B = ctx.batch, T = ctx.seq;
  Tensor q = ops::reshape(q_proj.forward(x, ctx), {B, T, heads, head_dim});
  Tensor k = ops::reshape(k_proj.forward(x, ctx), {B, T, kv_heads, head_dim});
  Tensor v = ops::reshape(v_proj.forward(x, ctx), {B, T, kv_heads, head_dim});
  q = ops::rope(q, ctx.positions, rotary_dim, rope_theta);
  k = ops::rope(k, ctx.positions, rotary_dim, rope_theta);
  Tensor out;
  if (ctx.cache) {
    GLM4_CHECK(!q.requires_grad() || !GradMode::enabled(),
               "[attention] the KV cache is for inference; run it under NoGradGuard");
    KvCache& cache = *ctx.cache;
    cache.append(ctx.layer_index, k, v);
    out = Tensor::empty(q.shape());
    kernels::AttentionArgs a;
    a.q = q.data();
    a.k = cache.keys(ctx.layer_index);
    a.v = cache.values(ctx.layer_index);
    a.out = out.data();
    a.B = B; a.T = T; a.S = cache.length() + T; a.Hq = heads; a.Hkv = kv_heads; a.D = head_dim;
    a.q_batch_stride = T * heads * head_dim;
    a.kv_batch_stride = cache.batch_stride();
    a.scale = float(1.0 / std::sqrt(double(head_dim)));
    a.mask = &ctx.mask;
    kernels::attention_forward(a);
  } else {
    out = ops::attention(q, k, v, ctx.mask);
  }
  return o_proj.forward(ops::reshape(out, {B, T, heads * head_dim}), ctx);
}

void Glm4Attention::visit(const std::string& prefix, const ParamVisitor& fn) {
  q_proj.visit(prefix + ".q_proj", fn);
  k_proj.visit(prefix + ".k_proj", fn);
  v_proj.visit(prefix + ".v_proj", fn);
  o_proj.visit(prefix + ".o_proj", fn);
}

void Glm4Attention::visit_linears(const std::string& prefix, int64_t layer, const LinearVisitor& fn) {
  for (auto [name, linear] : {std::pair{"q_proj", &q_proj}, {"k_proj", &k_proj}, {"v_proj", &v_proj},
                              {"o_proj", &o_proj}})
    fn({prefix + "." + name, layer, name}, *linear);
}

}  // namespace glm4
