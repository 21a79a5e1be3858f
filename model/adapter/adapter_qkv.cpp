// ChatGLM's fused query_key_value adapter (one A, one B over q|k|v rows) and the q/k/v modules
// sharing A that the MLX layout and the model hold instead. Both directions are exact.
#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "base/strings.h"
#include "model/adapter/adapter_files.h"

namespace glm4 {

std::vector<int64_t> qkv_rows_of(const ModelConfig& c) {
  const int64_t q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  return {q, kv, kv};
}

namespace {
const std::vector<std::string> kParts{"q_proj", "k_proj", "v_proj"};

void replace_targets(std::vector<std::string>& targets, bool to_fused) {
  std::vector<std::string> names;
  for (const std::string& t : targets) {
    if (to_fused && (t == "q_proj" || t == "k_proj" || t == "v_proj"))
      names.push_back(kFusedQkv);
    else if (!to_fused && t == kFusedQkv)
      names.insert(names.end(), kParts.begin(), kParts.end());
    else
      names.push_back(t);
  }
  targets = resolve_lora_targets(names);
}

std::vector<float> rows_of(const std::vector<float>& v, int64_t cols, int64_t begin, int64_t rows) {
  return std::vector<float>(v.begin() + begin * cols, v.begin() + (begin + rows) * cols);
}
}  // namespace

void split_fused_qkv(AdapterFile& a, const std::string& where) {
  std::vector<std::string> fused;
  for (const auto& [path, m] : a.modules) {
    int64_t layer;
    std::string name;
    if (parse_lora_module_path(path, &layer, &name) && name == kFusedQkv) fused.push_back(path);
  }
  if (fused.empty()) return;
  GLM4_CHECK(a.qkv_rows.size() == 3, where, ": splitting ChatGLM's ", kFusedQkv,
             " adapter into q_proj, k_proj and v_proj needs the base model's head counts; give the "
             "base model ",
             "(--model DIR)");
  const int64_t total = a.qkv_rows[0] + a.qkv_rows[1] + a.qkv_rows[2];
  for (const std::string& path : fused) {
    AdapterModule m = std::move(a.modules[path]);
    a.modules.erase(path);
    int64_t layer;
    std::string name;
    parse_lora_module_path(path, &layer, &name);
    GLM4_CHECK(m.b_shape[0] == total, where, ": ", path, " has B of shape ", shape_str(m.b_shape),
               " but q|k|v of ", "the base model have ", total, " rows (", a.qkv_rows[0], " + ",
               a.qkv_rows[1], " + ", a.qkv_rows[2], "); the adapter was made for another model");
    const int64_t r = m.b_shape[1];
    int64_t begin = 0;
    for (size_t i = 0; i < 3; ++i) {
      const int64_t rows = a.qkv_rows[i];
      AdapterModule& part = a.modules[lora_module_path(layer, kParts[i])];
      part.a_shape = m.a_shape;
      part.a = m.a;
      part.b_shape = {rows, r};
      if (!m.b.empty()) part.b = rows_of(m.b, r, begin, rows);
      if (!m.magnitude_shape.empty()) {
        part.magnitude_shape = {rows};
        if (!m.magnitude.empty()) part.magnitude = rows_of(m.magnitude, 1, begin, rows);
      }
      begin += rows;
    }
  }
  replace_targets(a.info.lora.targets, false);
}

void join_fused_qkv(AdapterFile& a, const std::string& where) {
  std::set<int64_t> layers;
  for (const auto& [path, m] : a.modules) {
    int64_t layer;
    std::string name;
    if (parse_lora_module_path(path, &layer, &name) &&
        std::find(kParts.begin(), kParts.end(), name) != kParts.end())
      layers.insert(layer);
  }
  if (layers.empty()) return;
  for (int64_t layer : layers) {
    std::vector<AdapterModule*> parts;
    for (const std::string& n : kParts) {
      auto it = a.modules.find(lora_module_path(layer, n));
      GLM4_CHECK(it != a.modules.end(), where, ": layer ", layer,
                 " has LoRA on some of q_proj, k_proj, v_proj ", "but not on ", n,
                 "; PEFT's ChatGLM layout adapts all three as one ", kFusedQkv);
      parts.push_back(&it->second);
    }
    for (size_t i = 1; i < 3; ++i)
      GLM4_CHECK(parts[i]->a_shape == parts[0]->a_shape && parts[i]->a == parts[0]->a, where,
                 ": layer ", layer, "'s q_proj and ", kParts[i],
                 " have different LoRA A; PEFT's ChatGLM layout has one A for the fused ",
                 kFusedQkv, " (train with --lora-targets ", kFusedQkv, ", or keep the mlx layout)");
    AdapterModule fused;
    fused.a_shape = parts[0]->a_shape;
    fused.a = parts[0]->a;
    const int64_t r = parts[0]->b_shape[1];
    int64_t rows = 0;
    for (AdapterModule* p : parts) {
      rows += p->b_shape[0];
      fused.b.insert(fused.b.end(), p->b.begin(), p->b.end());
      fused.magnitude.insert(fused.magnitude.end(), p->magnitude.begin(), p->magnitude.end());
    }
    fused.b_shape = {rows, r};
    if (!parts[0]->magnitude_shape.empty()) fused.magnitude_shape = {rows};
    for (const std::string& n : kParts) a.modules.erase(lora_module_path(layer, n));
    a.modules[lora_module_path(layer, kFusedQkv)] = std::move(fused);
  }
  replace_targets(a.info.lora.targets, true);
}

}  // namespace glm4
