#include "model/glm4_decoder_layer.h"

#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/recompute.h"
#include "autograd/saved_bf16.h"
#include "model/forward_context.h"

namespace glm4 {

namespace {
DecoderMlp make_mlp(const ModelConfig& c, int64_t layer) {
  if (!is_moe_family(c)) return DecoderMlp(std::in_place_type<Glm4Mlp>, c);
  if (is_moe_layer(c, layer)) return DecoderMlp(std::in_place_type<MoeBlock>, c);
  return DecoderMlp(std::in_place_type<SwigluMlp>, c.hidden_size, c.intermediate_size, 4);
}

DecoderAttention make_attention(const ModelConfig& c) {
  if (has_latent_attention(c)) return DecoderAttention(std::in_place_type<MlaAttention>, c);
  return DecoderAttention(std::in_place_type<Glm4Attention>, c);
}
}  // namespace

Glm4DecoderLayer::Glm4DecoderLayer(const ModelConfig& c, int64_t layer)
    : input_layernorm(c.hidden_size, c.rms_norm_eps),
      self_attn(make_attention(c)),
      post_attention_layernorm(c.hidden_size, c.rms_norm_eps),
      mlp(make_mlp(c, layer)) {
  if (c.post_norms) {
    post_self_attn_layernorm.emplace(c.hidden_size, c.rms_norm_eps);
    post_mlp_layernorm.emplace(c.hidden_size, c.rms_norm_eps);
  }
}

Tensor Glm4DecoderLayer::forward(const Tensor& x, const ForwardContext& ctx,
                                 CachedRows* rows) const {
  SavedInBf16 saved_in_bf16(ctx.compute.reduced_precision() && GradMode::enabled());
  const Tensor normed_x = input_layernorm.forward(x);
  Tensor a =
      std::visit([&](const auto& attn) { return attn.forward(normed_x, ctx, rows); }, self_attn);
  if (post_self_attn_layernorm) a = post_self_attn_layernorm->forward(a);
  Tensor h = ops::add(x, a);
  Tensor normed = post_attention_layernorm.forward(h);
  ForwardContext mlp_ctx_storage;
  const ForwardContext* mlp_ctx = &ctx;
  if (!post_mlp_layernorm && recompute_rerunning()) {  // m then only goes into the residual sum
    mlp_ctx_storage = ctx;
    mlp_ctx_storage.mlp_output_unread = true;
    mlp_ctx = &mlp_ctx_storage;
  }
  Tensor m = std::visit([&](const auto& mlp) { return mlp.forward(normed, *mlp_ctx); }, mlp);
  if (post_mlp_layernorm) m = post_mlp_layernorm->forward(m);
  Tensor out = ops::add(h, m);
  saved_in_bf16.pack();
  return out;
}

void Glm4DecoderLayer::visit(const std::string& prefix, const ParamVisitor& fn) {
  input_layernorm.visit(prefix + ".input_layernorm", fn);
  std::visit([&](auto& attn) { attn.visit(prefix + ".self_attn", fn); }, self_attn);
  if (post_self_attn_layernorm)
    post_self_attn_layernorm->visit(prefix + ".post_self_attn_layernorm", fn);
  post_attention_layernorm.visit(prefix + ".post_attention_layernorm", fn);
  std::visit([&](auto& mlp) { mlp.visit(prefix + ".mlp", fn); }, mlp);
  if (post_mlp_layernorm) post_mlp_layernorm->visit(prefix + ".post_mlp_layernorm", fn);
}

void Glm4DecoderLayer::visit_linears(const std::string& prefix, int64_t layer,
                                     const LinearVisitor& fn) {
  std::visit([&](auto& attn) { attn.visit_linears(prefix + ".self_attn", layer, fn); }, self_attn);
  std::visit([&](auto& mlp) { mlp.visit_linears(prefix + ".mlp", layer, fn); }, mlp);
}

}  // namespace glm4
