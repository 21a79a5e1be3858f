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

std::vector<std::string> resolve_lora_targets(const std::vector<std::string>& targets) {
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
                         name == "o_proj" || name == kFusedQkv;
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
  const auto& names = lora_module_names();
  if (std::find(names.begin(), names.end(), *name) == names.end()) return false;
  return rest.substr(0, sep) == lora_module_parent(*name);
}

}  // namespace glm4
