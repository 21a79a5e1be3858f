#include "model/glm4_decoder_layer.h"

#include "autograd/ops.h"

namespace glm4 {

Glm4DecoderLayer::Glm4DecoderLayer(const ModelConfig& c)
    : input_layernorm(c.hidden_size, c.rms_norm_eps),
      self_attn(c),
      post_attention_layernorm(c.hidden_size, c.rms_norm_eps),
      mlp(c) {
  if (c.post_norms) {
    post_self_attn_layernorm.emplace(c.hidden_size, c.rms_norm_eps);
    post_mlp_layernorm.emplace(c.hidden_size, c.rms_norm_eps);
  }
}

Tensor Glm4DecoderLayer::forward(const Tensor& x, const ForwardContext& ctx,
                                 CachedRows* rows) const {
  Tensor a = self_attn.forward(input_layernorm.forward(x), ctx, rows);
  if (post_self_attn_layernorm) a = post_self_attn_layernorm->forward(a);
  Tensor h = ops::add(x, a);
  Tensor m = mlp.forward(post_attention_layernorm.forward(h), ctx);
  if (post_mlp_layernorm) m = post_mlp_layernorm->forward(m);
  return ops::add(h, m);
}

void Glm4DecoderLayer::visit(const std::string& prefix, const ParamVisitor& fn) {
  input_layernorm.visit(prefix + ".input_layernorm", fn);
  self_attn.visit(prefix + ".self_attn", fn);
  if (post_self_attn_layernorm)
    post_self_attn_layernorm->visit(prefix + ".post_self_attn_layernorm", fn);
  post_attention_layernorm.visit(prefix + ".post_attention_layernorm", fn);
  mlp.visit(prefix + ".mlp", fn);
  if (post_mlp_layernorm) post_mlp_layernorm->visit(prefix + ".post_mlp_layernorm", fn);
}

void Glm4DecoderLayer::visit_linears(const std::string& prefix, int64_t layer,
                                     const LinearVisitor& fn) {
  self_attn.visit_linears(prefix + ".self_attn", layer, fn);
  mlp.visit_linears(prefix + ".mlp", layer, fn);
}

}  // namespace glm4
