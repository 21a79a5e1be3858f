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

// Where one of our tensors goes: alone, as rows of a fused tensor (ChatGLM's q|k|v, part = 0, 1,
// 2), or as expert `part` of a stacked [experts, out, in] tensor (glm4_moe's routed experts).
enum class Placement { Alone, Rows, Expert };

// glm4_moe's per-layer names (gguf-py's GLM4_MOE tensors): its second norm is post_attention_norm
// (there is no ffn_norm), separate ffn_gate / ffn_up, the router, the shared expert, the stacked
// routed experts; "mlp.experts.7.up_proj.weight" -> ffn_up_exps.weight, expert 7.
std::string map_moe_layer(const std::string& rest, int* part, Placement* how) {
  static const std::map<std::string, std::string> kMoe = {
      {"post_attention_layernorm.weight", "post_attention_norm.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      {"mlp.gate.weight", "ffn_gate_inp.weight"},
      {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias"},
      {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
      {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
      {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
  };
  if (auto it = kMoe.find(rest); it != kMoe.end()) return it->second;
  const std::string experts = "mlp.experts.";
  if (rest.rfind(experts, 0) != 0) return "";
  const size_t dot = rest.find('.', experts.size());
  if (dot == std::string::npos || dot == experts.size()) return "";
  const std::string index = rest.substr(experts.size(), dot - experts.size());
  if (index.find_first_not_of("0123456789") != std::string::npos) return "";
  for (const char* proj : {"gate", "up", "down"}) {
    if (rest.compare(dot + 1, std::string::npos, std::string(proj) + "_proj.weight") != 0) continue;
    *part = std::stoi(index);
    *how = Placement::Expert;
    return std::string("ffn_") + proj + "_exps.weight";
  }
  return "";
}

// GGUF name and placement of one of our tensors.
std::string map_name(const ModelConfig& c, const std::string& name, int* part, Placement* how) {
  *part = -1;
  *how = Placement::Alone;
  if (name == "model.embed_tokens.weight") return "token_embd.weight";
  if (name == "model.norm.weight") return "output_norm.weight";
  if (name == "lm_head.weight") return "output.weight";
  int64_t layer = 0;
  std::string rest;
  GLM4_CHECK(split_layer(name, &layer, &rest), "gguf export: no GGUF name for tensor '", name, "'");
  const std::string blk = "blk." + std::to_string(layer) + ".";
  const bool chatglm = c.family == ModelConfig::Family::ChatGlm;
  if (c.family == ModelConfig::Family::Glm4MoeLite) {
    if (std::string g = deepseek2_layer_name(rest, name); !g.empty()) return blk + g;
    if (rest.rfind("mlp.", 0) == 0) {
      if (std::string g = map_moe_layer(rest, part, how); !g.empty()) return blk + g;
    }
    fail("gguf export: no deepseek2 GGUF name for tensor '", name, "'");
  }
  if (c.family == ModelConfig::Family::Glm4Moe) {
    if (std::string g = map_moe_layer(rest, part, how); !g.empty()) return blk + g;
  }
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
      *how = Placement::Rows;
      return blk + "attn_qkv." + suffix;
    }
  }
  fail("gguf export: no GGUF name for tensor '", name, "'");
}

// deepseek2: kv_b_proj becomes attn_k_b [H, kv_lora, nope] and attn_v_b [H, v, kv_lora] in its
// place (DeepseekV2Model.modify_tensors); with rotate-half RoPE the rotary rows of q and kv_a are
// reordered into the adjacent pairs llama.cpp's deepseek2 rotates.
void deepseek2_reshapes(const ModelConfig& c, std::vector<GgufTensorPlan>& plan) {
  const std::string kvb = "attn_kv_b.weight";
  std::vector<GgufTensorPlan> out;
  for (GgufTensorPlan& t : plan) {
    const auto ends = [&](const std::string& s) {
      return t.name.size() >= s.size() &&
             t.name.compare(t.name.size() - s.size(), s.size(), s) == 0;
    };
    if (ends(kvb)) {
      const std::string blk = t.name.substr(0, t.name.size() - kvb.size());
      const int64_t H = c.num_attention_heads;
      out.push_back({blk + "attn_k_b.weight",
                     {H, c.kv_lora_rank, c.qk_nope_head_dim},
                     t.sources,
                     GgufReshape::KvbKeys});
      out.push_back({blk + "attn_v_b.weight",
                     {H, c.v_head_dim, c.kv_lora_rank},
                     t.sources,
                     GgufReshape::KvbValues});
      continue;
    }
    if (c.rope_style == RopeStyle::RotateHalf) {
      if (ends("attn_q.weight") || ends("attn_q_b.weight")) t.reshape = GgufReshape::RopeRowsQ;
      if (ends("attn_kv_a_mqa.weight")) t.reshape = GgufReshape::RopeRowsKv;
    }
    out.push_back(std::move(t));
  }
  plan = std::move(out);
}

}  // namespace

const char* gguf_arch_name(const ModelConfig& c) {
  switch (c.family) {
    case ModelConfig::Family::Glm4:
      return "glm4";
    case ModelConfig::Family::Glm4Moe:
      return "glm4moe";
    case ModelConfig::Family::Glm4MoeLite:
      return "deepseek2";  // llama.cpp loads GLM-4.7-Flash as a DeepSeek-V2 model
    case ModelConfig::Family::Glm:
    case ModelConfig::Family::ChatGlm:
      return "chatglm";
  }
  return "chatglm";
}

std::vector<GgufTensorPlan> gguf_tensor_plan(
    const ModelConfig& c, const std::vector<std::pair<std::string, std::vector<int64_t>>>& ours) {
  std::vector<GgufTensorPlan> plan;
  std::map<std::string, size_t> index;
  std::map<std::string, std::vector<std::pair<int, std::string>>> parts;
  std::map<std::string, std::vector<int64_t>> expert_shape;  // [out, in] of one expert
  for (const auto& [name, shape] : ours) {
    int part = -1;
    Placement how = Placement::Alone;
    const std::string g = map_name(c, name, &part, &how);
    auto it = index.find(g);
    if (it == index.end()) {
      index.emplace(g, plan.size());
      std::vector<int64_t> s = shape;
      if (how == Placement::Expert) {  // [experts, out, in], counted up below
        GLM4_CHECK(shape.size() == 2, "gguf export: expert weight '", name, "' is not a matrix");
        expert_shape[g] = shape;
        s.insert(s.begin(), 1);
      }
      plan.push_back({g, s, {name}});
      parts[g].emplace_back(part, name);
      continue;
    }
    GLM4_CHECK(part >= 0, "gguf export: tensors '", plan[it->second].sources[0], "' and '", name,
               "' both map to ", g);
    GgufTensorPlan& t = plan[it->second];
    if (how == Placement::Expert) {
      GLM4_CHECK(shape == expert_shape[g], "gguf export: expert weight '", name,
                 "' has another shape than '", t.sources[0], "', so it cannot be stacked into ", g);
      t.shape[0] += 1;
    } else {
      GLM4_CHECK(t.shape.size() == shape.size() && (shape.size() == 1 || t.shape[1] == shape[1]),
                 "gguf export: '", name, "' cannot be stacked under the rows of ", g);
      t.shape[0] += shape[0];
    }
    parts[g].emplace_back(part, name);
  }
  for (GgufTensorPlan& t : plan) {  // fused parts in q, k, v order; experts by id
    auto& p = parts[t.name];
    std::sort(p.begin(), p.end());
    t.sources.clear();
    for (const auto& [k, name] : p) t.sources.push_back(name);
    if (!expert_shape.count(t.name)) continue;
    for (size_t e = 0; e < p.size(); ++e) {
      GLM4_CHECK(p[e].first == int(e) && (e == 0 || p[e - 1].first != p[e].first),
                 "gguf export: ", t.name, " is missing expert ", e, " (or has it twice)");
    }
    GLM4_CHECK(int64_t(p.size()) == c.n_routed_experts, "gguf export: ", t.name, " stacks ",
               p.size(), " experts, the config has n_routed_experts = ", c.n_routed_experts);
  }
  if (c.family == ModelConfig::Family::Glm4MoeLite) deepseek2_reshapes(c, plan);
  return plan;
}

std::string gguf_weight_name(const ModelConfig& c, const std::string& module, int* part,
                             bool* expert) {
  Placement how = Placement::Alone;
  std::string g = map_name(c, module + ".weight", part, &how);
  if (expert) *expert = how == Placement::Expert;
  return g;
}

}  // namespace glm4
