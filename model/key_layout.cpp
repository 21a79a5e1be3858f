#include "model/key_layout.h"

#include <cctype>
#include <cmath>
#include <regex>

#include "base/check.h"
#include "model/lora.h"

namespace glm4 {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

FileSlice chatglm_source(const ModelConfig& c, const std::string& name) {
  if (name == "model.embed_tokens.weight") return {"transformer.embedding.word_embeddings.weight"};
  if (name == "model.norm.weight") return {"transformer.encoder.final_layernorm.weight"};
  if (name == "lm_head.weight") return {"transformer.output_layer.weight"};
  static const std::regex layer_key(R"(model\.layers\.(\d+)\.(.+))");
  std::smatch m;
  GLM4_CHECK(std::regex_match(name, m, layer_key), "[chatglm] no ChatGLM key for ", name);
  std::string base = "transformer.encoder.layers." + m[1].str() + ".";
  std::string rest = m[2].str();
  if (rest == "input_layernorm.weight" || rest == "post_attention_layernorm.weight")
    return {base + rest};
  if (rest == "self_attn.o_proj.weight") return {base + "self_attention.dense.weight"};
  if (rest == "mlp.gate_up_proj.weight") return {base + "mlp.dense_h_to_4h.weight"};
  if (rest == "mlp.down_proj.weight") return {base + "mlp.dense_4h_to_h.weight"};
  int64_t q_rows = c.num_attention_heads * c.head_dim, kv_rows = c.num_key_value_heads * c.head_dim;
  int64_t total = q_rows + 2 * kv_rows;
  std::string suffix = ends_with(rest, ".weight") ? "weight" : "bias";
  std::string qkv = base + "self_attention.query_key_value." + suffix;
  if (rest.rfind("self_attn.q_proj.", 0) == 0) return {qkv, 0, total};
  if (rest.rfind("self_attn.k_proj.", 0) == 0) return {qkv, q_rows, total};
  if (rest.rfind("self_attn.v_proj.", 0) == 0) return {qkv, q_rows + kv_rows, total};
  fail("[chatglm] no ChatGLM key for ", name);
}

// model.layers.N.mlp.experts.E.X.weight -> rows of model.layers.N.mlp.switch_mlp.X.weight.
FileSlice stacked_expert_source(const ModelConfig& c, const std::string& name) {
  static const std::regex expert_key(
      R"((model\.layers\.\d+\.mlp)\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight)");
  std::smatch m;
  if (!std::regex_match(name, m, expert_key)) return {name};
  const bool down = m[3].str() == "down_proj";
  const int64_t out = down ? c.hidden_size : c.moe_intermediate_size;
  const int64_t in = down ? c.moe_intermediate_size : c.hidden_size;
  const int64_t e = std::stoll(m[2].str());
  return {m[1].str() + ".switch_mlp." + m[3].str() + ".weight",
          e * out,
          c.n_routed_experts * out,
          {c.n_routed_experts, out, in}};
}

// The decoder layer index of a model.layers.N.* key, or -1.
int64_t layer_of_key(const std::string& key) {
  const std::string prefix = "model.layers.";
  if (key.rfind(prefix, 0) != 0) return -1;
  int64_t n = 0;
  size_t i = prefix.size();
  if (i >= key.size() || !std::isdigit(static_cast<unsigned char>(key[i]))) return -1;
  for (;
       i < key.size() && std::isdigit(static_cast<unsigned char>(key[i])) && n < (int64_t(1) << 40);
       ++i)
    n = n * 10 + (key[i] - '0');
  return i < key.size() && key[i] == '.' ? n : -1;
}
}  // namespace

FileSlice file_slice(const ModelConfig& c, const std::string& name, bool stacked_experts) {
  if (c.family == ModelConfig::Family::ChatGlm) return chatglm_source(c, name);
  if (stacked_experts) return stacked_expert_source(c, name);
  return {name};
}

bool is_stacked_expert_key(const std::string& key) {
  return key.find(".mlp.switch_mlp.") != std::string::npos;
}

bool is_split_kv_b_key(const std::string& key) {
  return key.find(".self_attn.embed_q.") != std::string::npos ||
         key.find(".self_attn.unembed_out.") != std::string::npos;
}

bool is_ignorable_file_key(const ModelConfig& c, const std::string& key) {
  // ChatGLM checkpoints store RoPE frequencies (at base 10000, ignoring rope_ratio): unused.
  if (c.family == ModelConfig::Family::ChatGlm) return ends_with(key, "rotary_pos_emb.inv_freq");
  // GLM-4.5's multi-token-prediction layers follow the last decoder layer; we do not run them.
  if (is_moe_family(c) && c.num_nextn_predict_layers > 0) {
    const int64_t layer = layer_of_key(key);
    return layer >= c.num_hidden_layers && layer < c.num_hidden_layers + c.num_nextn_predict_layers;
  }
  return false;
}

std::vector<DerivedTensor> derived_file_tensors(const ModelConfig& c) {
  if (c.family != ModelConfig::Family::ChatGlm) return {};
  // 1 / 10000^(2i / dim) in fp32, dim = the rotated dims (kv_channels / 2), as the reference's
  // RotaryEmbedding(kv_channels // 2) computes it.
  const int64_t dim = c.rotary_dim;
  DerivedTensor t{"transformer.rotary_pos_emb.inv_freq", {dim / 2}, {}};
  for (int64_t i = 0; i < dim / 2; ++i)
    t.values.push_back(1.0f / std::pow(10000.0f, float(2 * i) / float(dim)));
  return {t};
}

std::string chatglm_module_path(int64_t layer, const std::string& name) {
  GLM4_CHECK(name != "q_proj" && name != "k_proj" && name != "v_proj", "[chatglm] ", name,
             " has no module of its own in a ChatGLM checkpoint; its adapters go on the fused ",
             kFusedQkv);
  const char* parent =
      std::string(lora_module_parent(name)) == "self_attn" ? "self_attention" : "mlp";
  return str_cat("transformer.encoder.layers.", layer, ".", parent, ".", chatglm_target_name(name));
}

bool parse_chatglm_module_path(const std::string& path, int64_t* layer, std::string* name) {
  static const std::regex module(
      R"(transformer\.encoder\.layers\.(0|[1-9]\d{0,8})\.(self_attention|mlp)\.(\w+))");
  std::smatch m;
  if (!std::regex_match(path, m, module)) return false;
  const std::string leaf = m[3].str();
  if (leaf != kFusedQkv && leaf != "dense" && leaf != "dense_h_to_4h" && leaf != "dense_4h_to_h")
    return false;
  *layer = std::stoll(m[1].str());
  *name = resolve_lora_targets({leaf}).front();
  return chatglm_module_path(*layer, *name) == path;
}

}  // namespace glm4
