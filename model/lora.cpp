#include "model/lora.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "base/check.h"

namespace glm4 {

double LoraConfig::scale() const {
  return use_rslora ? alpha / std::sqrt(double(rank)) : alpha / double(rank);
}

const std::vector<std::string>& lora_module_names() {
  static const std::vector<std::string> names{kFusedQkv, "q_proj",       "k_proj",   "v_proj",
                                              "o_proj",  "gate_up_proj", "down_proj"};
  return names;
}

std::vector<std::string> lora_target_linears(const std::string& target) {
  if (target == kFusedQkv) return {"q_proj", "k_proj", "v_proj"};
  return {target};
}

namespace {
// ChatGLM's names for the linears it keeps separate, and ours.
const std::vector<std::pair<std::string, std::string>>& chatglm_aliases() {
  static const std::vector<std::pair<std::string, std::string>> a{
      {"dense", "o_proj"}, {"dense_h_to_4h", "gate_up_proj"}, {"dense_4h_to_h", "down_proj"}};
  return a;
}
}  // namespace

std::string chatglm_target_name(const std::string& name) {
  for (const auto& [theirs, ours] : chatglm_aliases())
    if (ours == name) return theirs;
  return name;
}

namespace {
const char* const kMoeMlp[] = {"gate_proj", "up_proj", "down_proj"};
// glm4_moe_lite's attention projections besides q_proj and o_proj.
const char* const kLatentAttention[] = {"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"};

bool is_latent_attention_leaf(const std::string& s) {
  return std::find(std::begin(kLatentAttention), std::end(kLatentAttention), s) !=
         std::end(kLatentAttention);
}

bool is_mlp_leaf(const std::string& s) {
  return s == "gate_proj" || s == "up_proj" || s == "down_proj";
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The dot-separated segments of a path.
std::vector<std::string> segments(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t dot; (dot = path.find('.', start)) != std::string::npos; start = dot + 1)
    out.push_back(path.substr(start, dot - start));
  out.push_back(path.substr(start));
  return out;
}

std::vector<std::string> resolve_moe_targets(const std::vector<std::string>& targets,
                                             bool latent_attention) {
  const auto& names = moe_lora_target_names();
  std::vector<std::string> wanted;
  for (std::string t : targets) {
    if (t == "all-linear") {
      wanted.insert(wanted.end(), names.begin(), names.begin() + 7);
      if (latent_attention)
        wanted.insert(wanted.end(), std::begin(kLatentAttention), std::end(kLatentAttention));
      continue;
    }
    if (t.rfind("self_attn.", 0) == 0) t = t.substr(10);
    if (t == "experts" || t == "shared_experts") {
      for (const char* p : kMoeMlp) wanted.push_back(t + "." + p);
      continue;
    }
    GLM4_CHECK(t != "gate" && t != "mlp.gate", "LoRA target \"", t,
               "\": the glm4_moe router (mlp.gate) is ",
               "not a linear layer (transformers' Glm4MoeTopkRouter, which PEFT cannot adapt "
               "either); it is ",
               "trained only by --full. Target the experts with gate_proj, up_proj, down_proj");
    if (std::find(names.begin(), names.end(), t) == names.end()) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      fail("unknown LoRA target module \"", t, "\" for glm4_moe; known: ", known,
           ", experts, shared_experts, all-linear");
    }
    wanted.push_back(t);
  }
  std::vector<std::string> out;
  for (const std::string& n : names) {
    if (std::find(wanted.begin(), wanted.end(), n) == wanted.end()) continue;
    const size_t dot = n.find('.');  // a qualified name is redundant beside its bare one
    if (dot != std::string::npos &&
        std::find(out.begin(), out.end(), n.substr(dot + 1)) != out.end())
      continue;
    out.push_back(n);
  }
  GLM4_CHECK(!out.empty(), "no LoRA target modules given");
  return out;
}
}  // namespace

const std::vector<std::string>& moe_lora_target_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n{"q_proj",    "k_proj",  "v_proj",   "o_proj",
                               "gate_proj", "up_proj", "down_proj"};
    for (const char* kind : {"mlp", "shared_experts", "experts"})
      for (const char* p : kMoeMlp) n.push_back(std::string(kind) + "." + p);
    for (const char* p : kLatentAttention) n.push_back(p);
    return n;
  }();
  return names;
}

bool names_moe_targets(const std::vector<std::string>& targets) {
  for (const std::string& t : targets) {
    if (t == "gate_proj" || t == "up_proj" || t == "experts" || t == "shared_experts" ||
        t == "gate" || t.rfind("experts.", 0) == 0 || t.rfind("shared_experts.", 0) == 0 ||
        t == "mlp.gate_proj" || t == "mlp.up_proj" || t == "mlp.gate")
      return true;
    // Latent attention is glm4_moe_lite's alone.
    if (is_latent_attention_leaf(t.rfind("self_attn.", 0) == 0 ? t.substr(10) : t)) return true;
  }
  return false;
}

std::string qualified_lora_target(const std::string& path) {
  const std::vector<std::string> s = segments(path);
  const std::string& leaf = s.back();
  if (!is_mlp_leaf(leaf) || s.size() < 2) return leaf;
  const std::string& parent = s[s.size() - 2];
  if (parent == "shared_experts") return "shared_experts." + leaf;
  if (all_digits(parent) && s.size() >= 3 && s[s.size() - 3] == "experts") return "experts." + leaf;
  return parent + "." + leaf;
}

bool lora_target_matches(const std::string& target, const std::string& path) {
  const size_t dot = path.rfind('.');
  const std::string leaf = dot == std::string::npos ? path : path.substr(dot + 1);
  if (target.find('.') == std::string::npos) {
    const std::vector<std::string> linears = lora_target_linears(target);
    return std::find(linears.begin(), linears.end(), leaf) != linears.end();
  }
  return qualified_lora_target(path) == target;
}

bool is_latent_attention_path(const std::string& path) {
  const size_t dot = path.rfind('.');
  return is_latent_attention_leaf(dot == std::string::npos ? path : path.substr(dot + 1));
}

bool is_moe_module_path(const std::string& path) {
  const std::string q = qualified_lora_target(path);
  return q.rfind("experts.", 0) == 0 || q.rfind("shared_experts.", 0) == 0 ||
         q == "mlp.gate_proj" || q == "mlp.up_proj";
}

std::vector<std::string> resolve_lora_targets(const std::vector<std::string>& targets, bool moe,
                                              bool latent_attention) {
  if (moe) return resolve_moe_targets(targets, latent_attention);
  const auto& names = lora_module_names();
  std::vector<std::string> wanted;
  for (std::string t : targets) {
    if (t == "all-linear") {
      wanted.insert(wanted.end(), names.begin() + 1, names.end());
      continue;
    }
    for (const auto& [theirs, ours] : chatglm_aliases())
      if (t == theirs) t = ours;
    if (std::find(names.begin(), names.end(), t) == names.end()) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      fail("unknown LoRA target module \"", t, "\"; known: ", known,
           ", all-linear (ChatGLM's dense, dense_h_to_4h, dense_4h_to_h are o_proj, gate_up_proj, "
           "down_proj)");
    }
    wanted.push_back(t);
  }
  std::vector<std::string> out;
  for (const std::string& n : names)
    if (std::find(wanted.begin(), wanted.end(), n) != wanted.end()) out.push_back(n);
  GLM4_CHECK(!out.empty(), "no LoRA target modules given");
  if (out.front() == kFusedQkv)
    for (const char* separate : {"q_proj", "k_proj", "v_proj"})
      GLM4_CHECK(std::find(out.begin(), out.end(), separate) == out.end(), "LoRA targets ",
                 kFusedQkv, " and ", separate, " overlap: ", kFusedQkv,
                 " already adapts q_proj, k_proj and v_proj");
  return out;
}

const char* lora_module_parent(const std::string& name) {
  const bool attention = name == "q_proj" || name == "k_proj" || name == "v_proj" ||
                         name == "o_proj" || name == kFusedQkv || is_latent_attention_leaf(name);
  return attention ? "self_attn" : "mlp";
}

std::string lora_module_path(int64_t layer, const std::string& name) {
  return str_cat("model.layers.", layer, ".", lora_module_parent(name), ".", name);
}

bool parse_lora_module_path(const std::string& path, int64_t* layer, std::string* name) {
  const std::string prefix = "model.layers.";
  if (path.rfind(prefix, 0) != 0) return false;
  size_t dot = path.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return false;
  const char* first = path.data() + prefix.size();
  const char* last = path.data() + dot;
  if (*first == '0' && last - first > 1) return false;  // one spelling per index
  auto [end, ec] = std::from_chars(first, last, *layer);
  if (ec != std::errc() || end != last || *layer < 0) return false;
  std::string rest = path.substr(dot + 1);
  size_t sep = rest.find('.');
  if (sep == std::string::npos) return false;
  *name = rest.substr(sep + 1);
  // glm4_moe: mlp.gate_proj / mlp.up_proj, mlp.shared_experts.X, mlp.experts.E.X
  if (rest.rfind("mlp.", 0) == 0) {
    const std::vector<std::string> s = segments(rest);
    const bool dense = s.size() == 2 && (s[1] == "gate_proj" || s[1] == "up_proj");
    const bool shared = s.size() == 3 && s[1] == "shared_experts" && is_mlp_leaf(s[2]);
    const bool routed = s.size() == 4 && s[1] == "experts" && all_digits(s[2]) &&
                        (s[2] == "0" || s[2][0] != '0') && s[2].size() < 10 && is_mlp_leaf(s[3]);
    if (dense || shared || routed) {
      *name = s.back();
      return true;
    }
  }
  const auto& names = lora_module_names();
  if (std::find(names.begin(), names.end(), *name) == names.end() &&
      !is_latent_attention_leaf(*name))
    return false;
  return rest.substr(0, sep) == lora_module_parent(*name);
}

}  // namespace glm4
