#include "model/glm4_model.h"

#include <algorithm>
#include <random>
#include <set>

#include "autograd/ops.h"
#include "autograd/recompute.h"
#include "base/check.h"
#include "model/dora.h"

namespace glm4 {

Glm4Model::Glm4Model(const ModelConfig& c)
    : config(c), embed_tokens(c.vocab_size, c.hidden_size), norm(c.hidden_size, c.rms_norm_eps) {
  if (!c.tie_word_embeddings) lm_head.emplace(c.hidden_size, c.vocab_size, false, 6);
  layers.reserve(size_t(c.num_hidden_layers));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers.emplace_back(c, i);
}

Tensor Glm4Model::forward_hidden(std::span<const int32_t> ids, const ForwardContext& ctx,
                                 CachedRows* rows) const {
  GLM4_CHECK(int64_t(ids.size()) == ctx.batch * ctx.seq &&
                 int64_t(ctx.positions.size()) == ctx.batch * ctx.seq,
             "[model] ", ids.size(), " ids and ", ctx.positions.size(), " positions for batch ",
             ctx.batch, " x ", ctx.seq);
  Tensor h = ops::reshape(embed_tokens.forward(ids), {ctx.batch, ctx.seq, config.hidden_size});
  for (size_t i = 0; i < layers.size(); ++i) {
    ForwardContext layer_ctx = ctx;
    layer_ctx.layer_index = int64_t(i);
    layer_ctx.compute = compute;
    // glm4_moe routes every position, padding included: its padding rows attend as in transformers.
    layer_ctx.mask.padding_queries_attend = is_moe_family(config);
    const Glm4DecoderLayer& layer = layers[i];
    if (rows) {
      h = layer.forward(h, layer_ctx, rows);
    } else if (ctx.recompute_layers) {
      h = recompute([&layer, layer_ctx](
                        const std::vector<Tensor>& in) { return layer.forward(in[0], layer_ctx); },
                    {h});
    } else {
      h = layer.forward(h, layer_ctx);
    }
    if (ctx.layer_outputs) ctx.layer_outputs->push_back(h.detach());
  }
  return norm.forward(h);
}

Tensor Glm4Model::logits(const Tensor& hidden, const ForwardContext& ctx) const {
  return linear(hidden, lm_head_weight(), Tensor(), compute);
}

void Glm4Model::visit(const ParamVisitor& fn) {
  embed_tokens.visit("model.embed_tokens", fn);
  for (size_t i = 0; i < layers.size(); ++i)
    layers[i].visit("model.layers." + std::to_string(i), fn);
  norm.visit("model.norm", fn);
  if (lm_head) lm_head->visit("lm_head", fn);
}

void Glm4Model::visit_linears(const LinearVisitor& fn) {
  for (size_t i = 0; i < layers.size(); ++i)
    layers[i].visit_linears("model.layers." + std::to_string(i), int64_t(i), fn);
  if (lm_head) fn({"lm_head", -1, "lm_head"}, *lm_head);
}

Linear* Glm4Model::find_linear(const std::string& path) {
  Linear* found = nullptr;
  visit_linears([&](const LinearSite& site, Linear& linear) {
    if (site.path == path) found = &linear;
  });
  return found;
}

int64_t Glm4Model::add_lora(const LoraConfig& lora, uint64_t seed) {
  const bool moe = is_moe_family(config);
  std::vector<std::string> targets =
      resolve_lora_targets(lora.targets, moe, has_latent_attention(config));
  const bool fused = targets.front() == kFusedQkv;
  GLM4_CHECK(!fused || config.family == ModelConfig::Family::ChatGlm, "LoRA target ", kFusedQkv,
             " is ChatGLM's fused q|k|v projection; this ", family_name(config.family),
             " model has separate q_proj, k_proj, v_proj: target those");
  auto targeted = [&](const LinearSite& site) {
    for (const std::string& t : targets)
      if (lora_target_matches(t, site.path)) return true;
    return false;
  };
  const int64_t n_layers = int64_t(layers.size());
  const int64_t first = lora.num_layers < 0 ? 0 : std::max<int64_t>(0, n_layers - lora.num_layers);
  std::mt19937_64 rng(seed);
  int64_t count = 0;
  const LoraWeights* q_adapter = nullptr;  // the fused A's owner on this layer
  int q_slot = -1;
  visit_linears([&](const LinearSite& site, Linear& linear) {
    if (site.layer < first || !targeted(site)) return;
    GLM4_CHECK(!lora.dora || !moe || std::string(lora_module_parent(site.name)) != "mlp",
               "DoRA on glm4_moe's ", "MLP and expert linears (", site.path,
               ") is not supported; target the attention projections ", "only, or use plain LoRA");
    const bool shares = fused && (site.name == "k_proj" || site.name == "v_proj");
    if (shares) {
      linear.lora =
          linear.make_lora(lora.rank, float(lora.scale()), float(lora.dropout), rng, q_adapter);
      linear.lora->dropout_slot = q_slot;
    } else {
      linear.add_lora(lora.rank, float(lora.scale()), float(lora.dropout), rng);
    }
    if (fused && site.name == "q_proj") q_adapter = linear.lora.get(), q_slot = linear.seed_slot;
    if (lora.dora) linear.lora->magnitude = dora_initial_magnitude(linear.weight);
    ++count;
  });
  return count;
}

std::vector<std::pair<std::string, Tensor>> Glm4Model::lora_parameters() {
  std::vector<std::pair<std::string, Tensor>> out;
  std::set<const TensorImpl*> seen;
  visit_linears([&](const LinearSite& site, Linear& linear) {
    if (!linear.lora) return;
    if (seen.insert(linear.lora->lora_A.impl()).second)
      out.push_back({site.path + ".lora_A", linear.lora->lora_A});
    out.push_back({site.path + ".lora_B", linear.lora->lora_B});
    if (linear.lora->dora()) out.push_back({site.path + ".lora_magnitude", linear.lora->magnitude});
  });
  return out;
}

}  // namespace glm4
