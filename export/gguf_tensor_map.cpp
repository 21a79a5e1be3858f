// Name mapping from our checkpoint-style names to llama.cpp's blk.N.* names, per family.
#include "export/gguf_tensor_map.h"

#include <algorithm>
#include <map>

#include "base/check.h"

namespace glm4 {
namespace {

// "model.layers.12.self_attn.q_proj.weight" -> layer 12, rest "self_attn.q_proj.weight".
bool split_layer(const std::string& name, int64_t* layer, std::string* rest) {
  const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return false;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return false;
  *layer = std::stoll(name.substr(prefix.size(), dot - prefix.size()));
  *rest = name.substr(dot + 1);
  return true;
}

// GGUF name and fused part (-1: none) of one of our tensors.
std::string map_name(const ModelConfig& c, const std::string& name, int* part) {
  *part = -1;
  if (name == "model.embed_tokens.weight") return "token_embd.weight";
  if (name == "model.norm.weight") return "output_norm.weight";
  if (name == "lm_head.weight") return "output.weight";
  int64_t layer = 0;
  std::string rest;
  GLM4_CHECK(split_layer(name, &layer, &rest), "gguf export: no GGUF name for tensor '", name, "'");
  const std::string blk = "blk." + std::to_string(layer) + ".";
  const bool chatglm = c.family == ModelConfig::Family::ChatGlm;
  static const std::map<std::string, std::string> kLayer = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"post_self_attn_layernorm.weight", "post_attention_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"post_mlp_layernorm.weight", "post_ffw_norm.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"mlp.gate_up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  if (auto it = kLayer.find(rest); it != kLayer.end()) return blk + it->second;
  const char* const kProj[] = {"q", "k", "v"};
  for (int p = 0; p < 3; ++p) {
    for (const char* suffix : {"weight", "bias"}) {
      if (rest != std::string("self_attn.") + kProj[p] + "_proj." + suffix) continue;
      if (!chatglm) return blk + "attn_" + kProj[p] + "." + suffix;
      *part = p;
      return blk + "attn_qkv." + suffix;
    }
  }
  fail("gguf export: no GGUF name for tensor '", name, "'");
}

}  // namespace

const char* gguf_arch_name(const ModelConfig& c) {
  GLM4_CHECK(c.family != ModelConfig::Family::Glm4Moe,
             "gguf export: glm4_moe models (llama.cpp's glm4moe) ", "are not supported yet");
  return c.family == ModelConfig::Family::Glm4 ? "glm4" : "chatglm";
}

std::vector<GgufTensorPlan> gguf_tensor_plan(
    const ModelConfig& c, const std::vector<std::pair<std::string, std::vector<int64_t>>>& ours) {
  std::vector<GgufTensorPlan> plan;
  std::map<std::string, size_t> index;
  std::map<std::string, std::vector<std::pair<int, std::string>>> parts;
  for (const auto& [name, shape] : ours) {
    int part = -1;
    const std::string g = map_name(c, name, &part);
    auto it = index.find(g);
    if (it == index.end()) {
      index.emplace(g, plan.size());
      plan.push_back({g, shape, {name}});
      parts[g].emplace_back(part, name);
      continue;
    }
    GLM4_CHECK(part >= 0, "gguf export: tensors '", plan[it->second].sources[0], "' and '", name,
               "' both map to ", g);
    GgufTensorPlan& t = plan[it->second];
    GLM4_CHECK(t.shape.size() == shape.size() && (shape.size() == 1 || t.shape[1] == shape[1]),
               "gguf export: '", name, "' cannot be stacked under the rows of ", g);
    t.shape[0] += shape[0];
    parts[g].emplace_back(part, name);
  }
  for (GgufTensorPlan& t : plan) {  // fused parts in q, k, v order
    auto& p = parts[t.name];
    std::sort(p.begin(), p.end());
    t.sources.clear();
    for (const auto& [k, name] : p) t.sources.push_back(name);
  }
  return plan;
}

std::string gguf_weight_name(const ModelConfig& c, const std::string& module, int* part) {
  return map_name(c, module + ".weight", part);
}

}  // namespace glm4
