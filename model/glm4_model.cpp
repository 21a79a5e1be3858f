#include "model/glm4_model.h"

#include <charconv>
#include <random>

#include "autograd/recompute.h"
#include "base/check.h"
#include "autograd/ops.h"

namespace glm4 {

Glm4Model::Glm4Model(const ModelConfig& c)
    : config(c), embed_tokens(c.vocab_size, c.hidden_size), norm(c.hidden_size, c.rms_norm_eps),
      lm_head(c.hidden_size, c.vocab_size, false, 6) {
  layers.reserve(size_t(c.num_hidden_layers));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers.emplace_back(c);
}

Tensor Glm4Model::forward_hidden(std::span<const int32_t> ids, const ForwardContext& ctx) const {
  GLM4_CHECK(int64_t(ids.size()) == ctx.batch * ctx.seq && int64_t(ctx.positions.size()) == ctx.batch * ctx.seq,
             "[model] ", ids.size(), " ids and ", ctx.positions.size(), " positions for batch ",
             ctx.batch, " x ", ctx.seq);
  Tensor h = ops::reshape(embed_tokens.forward(ids), {ctx.batch, ctx.seq, config.hidden_size});
  for (size_t i = 0; i < layers.size(); ++i) {
    ForwardContext layer_ctx = ctx;
    layer_ctx.layer_index = int64_t(i);
    const Glm4DecoderLayer& layer = layers[i];
    if (ctx.recompute_layers) {
      h = recompute([&layer, layer_ctx](const std::vector<Tensor>& in) {
            return layer.forward(in[0], layer_ctx);
          }, {h});
    } else {
      h = layer.forward(h, layer_ctx);
    }
    if (ctx.layer_outputs) ctx.layer_outputs->push_back(h.detach());
  }
  return norm.forward(h);
}

Tensor Glm4Model::logits(const Tensor& hidden, const ForwardContext& ctx) const {
  const Param& w = lm_head_weight();
  return w.value.defined() ? ops::linear(hidden, w.value, Tensor()) : ops::linear(hidden, w.frozen, Tensor());
}

void Glm4Model::visit(const ParamVisitor& fn) {
  embed_tokens.visit("model.embed_tokens", fn);
  for (size_t i = 0; i < layers.size(); ++i) layers[i].visit("model.layers." + std::to_string(i), fn);
  norm.visit("model.norm", fn);
  if (!tie()) lm_head.visit("lm_head", fn);
}

void Glm4Model::visit_lora(const LoraVisitor& fn) {
  for (size_t i = 0; i < layers.size(); ++i) layers[i].visit_lora("model.layers." + std::to_string(i), fn);
}

int64_t Glm4Model::add_lora(const LoraConfig& lora, uint64_t seed) {
  std::vector<std::string> targets = resolve_lora_targets(lora.targets);
  int64_t n_layers = int64_t(layers.size());
  int64_t first = lora.num_layers < 0 ? 0 : std::max<int64_t>(0, n_layers - lora.num_layers);
  std::mt19937_64 rng(seed);
  int64_t count = 0;
  for (int64_t i = first; i < n_layers; ++i)
    for (const std::string& t : targets) {
      layers[i].module(t)->add_lora(lora.rank, float(lora.scale()), float(lora.dropout), rng);
      ++count;
    }
  return count;
}

Linear* Glm4Model::find_linear(const std::string& path) {
  const std::string prefix = "model.layers.";
  if (path.rfind(prefix, 0) != 0) return nullptr;
  size_t dot = path.find('.', prefix.size());
  if (dot == std::string::npos) return nullptr;
  int64_t i = -1;
  const char* digits = path.data() + prefix.size();
  auto [end, ec] = std::from_chars(digits, path.data() + dot, i);
  if (ec != std::errc() || end != path.data() + dot || i < 0 || i >= int64_t(layers.size())) return nullptr;
  std::string rest = path.substr(dot + 1);
  size_t last = rest.rfind('.');
  if (last == std::string::npos) return nullptr;
  std::string parent = rest.substr(0, last), name = rest.substr(last + 1);
  bool attn = name == "q_proj" || name == "k_proj" || name == "v_proj" || name == "o_proj";
  if ((attn && parent != "self_attn") || (!attn && parent != "mlp")) return nullptr;
  return layers[i].module(name);
}

}  // namespace glm4
