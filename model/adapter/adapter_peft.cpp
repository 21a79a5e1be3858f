// PEFT LoRA adapters: adapter_model.safetensors (base_model.model.<module>.lora_A.weight [r, in],
// lora_B.weight [out, r], DoRA's lora_magnitude_vector [out]) and the adapter_config.json fields
// PEFT writes for LoRA. <module> is the checkpoint's own path: model.layers.N.self_attn.q_proj for
// glm4/glm, transformer.encoder.layers.N.self_attention.query_key_value (dense, mlp.dense_h_to_4h,
// mlp.dense_4h_to_h) for ChatGLM.
#include <algorithm>

#include "base/check.h"
#include "io/file/atomic_file.h"
#include "io/safetensors.h"
#include "model/adapter/adapter_detail.h"
#include "model/key_layout.h"

namespace glm4::adapter_detail {
namespace fs = std::filesystem;

namespace {
constexpr const char* kPrefix = "base_model.model.";

// PEFT's key suffixes; older PEFT wrote the magnitude with ".weight" and still reads both.
bool split_suffix(const std::string& key, std::string* body, AdapterPart* part) {
  static const std::vector<std::pair<std::string, AdapterPart>> suffixes{
      {".lora_A.weight", AdapterPart::A},
      {".lora_B.weight", AdapterPart::B},
      {".lora_magnitude_vector", AdapterPart::Magnitude},
      {".lora_magnitude_vector.weight", AdapterPart::Magnitude}};
  const size_t start = std::string(kPrefix).size();
  if (key.rfind(kPrefix, 0) != 0) return false;
  for (const auto& [suffix, p] : suffixes)
    if (key.size() > start + suffix.size() &&
        key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0) {
      *body = key.substr(start, key.size() - start - suffix.size());
      *part = p;
      return true;
    }
  return false;
}

// A module path in the naming of the file's family: ours (model.layers.N.self_attn.q_proj) or
// ChatGLM's (transformer.encoder.layers.N.self_attention.query_key_value).
bool parse_peft_key(const std::string& key, bool chatglm, std::string* module, AdapterPart* part) {
  std::string body;
  if (!split_suffix(key, &body, part)) return false;
  int64_t layer;
  std::string name;
  if (chatglm) {
    if (!parse_chatglm_module_path(body, &layer, &name)) return false;
    *module = lora_module_path(layer, name);
    return true;
  }
  *module = body;
  return parse_lora_module_path(body, &layer, &name) && name != kFusedQkv;
}

bool has_chatglm_keys(const fs::path& weights) {
  auto file = SafetensorsFile::open(weights);
  const std::string prefix = std::string(kPrefix) + "transformer.encoder.layers.";
  for (const TensorInfo& t : file->tensors())
    if (t.name.rfind(prefix, 0) == 0) return true;
  return false;
}

// Settings PEFT can write that this loader does not implement: refuse rather than misread.
void check_unsupported(const json& j, const std::string& f) {
  std::string bias = get_string(j, "bias", f, "none");
  GLM4_CHECK(bias == "none", f, ": bias is \"", bias, "\"; only \"none\" is supported");
  GLM4_CHECK(!get_bool(j, "fan_in_fan_out", f, false), f,
             ": fan_in_fan_out is true; GLM-4 linears ", "store [out, in], so it must be false");
  for (const char* key :
       {"modules_to_save", "rank_pattern", "alpha_pattern", "layer_replication"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null() || it->empty()) continue;
    fail(f, ": field \"", key, "\" is ", it->dump(), "; per-module settings are not supported");
  }
  if (auto it = j.find("layers_pattern"); it != j.end() && !it->is_null()) {
    bool ok = *it == "layers" || *it == json::array({"layers"}) || (it->is_array() && it->empty());
    GLM4_CHECK(ok, f, ": layers_pattern is ", it->dump(), "; GLM-4 decoder layers are \"layers\"");
  }
}

std::vector<int64_t> read_layer_list(const json& j, const std::string& f) {
  std::vector<int64_t> out;
  auto it = j.find("layers_to_transform");
  if (it == j.end() || it->is_null()) return out;
  json list = it->is_array() ? *it : json::array({*it});
  for (const json& v : list) {
    GLM4_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0, f,
               ": layers_to_transform must hold layer indices, got ", v.dump());
    out.push_back(v.get<int64_t>());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  GLM4_CHECK(!out.empty(), f, ": layers_to_transform is an empty list");
  return out;
}
}  // namespace

AdapterFile read_peft(const fs::path& dir, bool with_tensors) {
  const fs::path cfg = dir / "adapter_config.json";
  const std::string f = cfg.string();
  json j = read_json_object(cfg);
  AdapterFile a;
  a.info.format = "peft";
  std::string type = get_string(j, "peft_type", f);
  GLM4_CHECK(type == "LORA", f, ": peft_type is \"", type, "\"; only LORA adapters are supported");
  check_unsupported(j, f);
  LoraConfig& l = a.info.lora;
  l.rank = get_int(j, "r", f, 8);  // PEFT's defaults
  GLM4_CHECK(l.rank > 0, f, ": field \"r\" must be positive, got ", l.rank);
  l.alpha = get_number(j, "lora_alpha", f, 8.0);
  l.dropout = get_number(j, "lora_dropout", f, 0.0);
  GLM4_CHECK(l.dropout >= 0 && l.dropout < 1, f, ": lora_dropout must be in [0, 1), got ",
             l.dropout);
  l.use_rslora = get_bool(j, "use_rslora", f, false);
  l.dora = get_bool(j, "use_dora", f, false);
  a.info.base_model_name_or_path = get_string(j, "base_model_name_or_path", f, "");
  a.info.scale = l.scale();

  // A list of module names is the usual form; a string is "all-linear" or a regular expression
  // over full module names, in which case the file's tensors say which modules are adapted.
  bool targets_from_config = false;
  if (auto it = j.find("target_modules"); it != j.end() && !it->is_null()) {
    if (it->is_array()) {
      std::vector<std::string> names;
      for (const json& v : *it) {
        GLM4_CHECK(v.is_string(), f, ": target_modules must hold strings, got ", v.dump());
        names.push_back(v.get<std::string>());
      }
      l.targets = canonical_targets(names, f, "target_modules");
      targets_from_config = true;
    } else if (*it != "all-linear") {
      GLM4_CHECK(it->is_string(), f, ": target_modules must be a list or a string, got ",
                 it->dump());
    }
  }
  a.info.layers = read_layer_list(j, f);
  l.num_layers = a.info.layers.empty() ? -1 : int64_t(a.info.layers.size());

  const fs::path weights = dir / "adapter_model.safetensors";
  a.chatglm = has_chatglm_keys(weights);
  const bool chatglm = a.chatglm;
  read_tensors(
      a, weights,
      [chatglm](const std::string& key, std::string* module, AdapterPart* part) {
        return parse_peft_key(key, chatglm, module, part);
      },
      false, targets_from_config, with_tensors);
  if (!a.info.layers.empty()) {
    std::set<int64_t> listed(a.info.layers.begin(), a.info.layers.end());
    GLM4_CHECK(listed == a.layers_present(), (dir / "adapter_model.safetensors").string(),
               ": holds LoRA tensors for layers other than layers_to_transform in ", f);
  }
  return a;
}

void write_peft(const AdapterFile& in, const fs::path& dir) {
  AdapterFile a = in;
  const std::string where = "adapter " + dir.string();
  if (a.chatglm) join_fused_qkv(a, where);
  const LoraConfig& l = a.info.lora;
  std::vector<TensorToWrite> tensors;
  for (const auto& [module, m] : a.modules) {
    int64_t layer;
    std::string name;
    GLM4_CHECK(
        a.chatglm || (parse_lora_module_path(module, &layer, &name) && name != kFusedQkv), where,
        ": ", module,
        " is ChatGLM's fused projection, but the adapter is not marked as one for a ChatGLM model");
    tensors.push_back(f32_tensor(adapter_tensor_key("peft", module, AdapterPart::A, a.chatglm),
                                 m.a_shape, m.a.data()));
    tensors.push_back(f32_tensor(adapter_tensor_key("peft", module, AdapterPart::B, a.chatglm),
                                 m.b_shape, m.b.data()));
    if (l.dora)
      tensors.push_back(
          f32_tensor(adapter_tensor_key("peft", module, AdapterPart::Magnitude, a.chatglm),
                     m.magnitude_shape, m.magnitude.data()));
  }
  write_safetensors(dir / "adapter_model.safetensors", tensors, {{"format", "pt"}});
  std::vector<std::string> target_modules;
  for (const std::string& t : l.targets)
    target_modules.push_back(a.chatglm ? chatglm_target_name(t) : t);
  // PEFT matches a list entry as a suffix of the module path; glm4_moe's "experts.X" (every
  // routed expert mlp.experts.E.X) has no such suffix, so those targets go as one regular
  // expression, which PEFT matches against the whole path.
  std::string pattern;
  if (std::any_of(l.targets.begin(), l.targets.end(),
                  [](const std::string& t) { return t.rfind("experts.", 0) == 0; })) {
    for (const std::string& t : l.targets) {
      const size_t dot = t.find('.');
      std::string alt = dot == std::string::npos ? t : t.substr(0, dot) + "\\." + t.substr(dot + 1);
      if (t.rfind("experts.", 0) == 0) alt = "experts\\.[0-9]+\\." + t.substr(dot + 1);
      pattern += (pattern.empty() ? "" : "|") + alt;
    }
    pattern = ".*\\.(" + pattern + ")";
  }

  // The fields PEFT's LoraConfig writes (PEFT sorts keys; nlohmann::json keeps them sorted).
  json j = json::object();
  j["alpha_pattern"] = json::object();
  j["auto_mapping"] = nullptr;
  j["base_model_name_or_path"] =
      a.info.base_model_name_or_path.empty() ? json(nullptr) : json(a.info.base_model_name_or_path);
  j["bias"] = "none";
  j["fan_in_fan_out"] = false;
  j["inference_mode"] = true;
  j["init_lora_weights"] = true;
  j["layer_replication"] = nullptr;
  j["layers_pattern"] = nullptr;
  j["layers_to_transform"] = a.info.layers.empty() ? json(nullptr) : json(a.info.layers);
  j["loftq_config"] = json::object();
  j["lora_alpha"] = number_json(l.alpha);
  j["lora_dropout"] = l.dropout;
  j["megatron_config"] = nullptr;
  j["megatron_core"] = "megatron.core";
  j["modules_to_save"] = nullptr;
  j["peft_type"] = "LORA";
  j["r"] = l.rank;
  j["rank_pattern"] = json::object();
  j["revision"] = nullptr;
  j["target_modules"] = pattern.empty() ? json(target_modules) : json(pattern);
  j["task_type"] = "CAUSAL_LM";
  j["use_dora"] = l.dora;
  j["use_rslora"] = l.use_rslora;
  write_file_atomic(dir / "adapter_config.json", j.dump(2) + "\n");
}

}  // namespace glm4::adapter_detail
