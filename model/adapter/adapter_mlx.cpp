// mlx-lm LoRA adapters: adapters.safetensors (model.layers.N.<module>.lora_a [in, r], lora_b
// [r, out], DoRA's m [out]) and adapter_config.json ({fine_tune_type: lora | dora, num_layers,
// lora_parameters: {rank, scale, dropout, keys}}). ChatGLM's fused query_key_value adapter is
// written as q/k/v modules with the same lora_a (mlx-lm has no fused module). mlx-lm adapts the
// last num_layers decoder layers (<= 0: all of them), and its scale multiplies B A x directly.
#include <algorithm>

#include "base/check.h"
#include "io/file/atomic_file.h"
#include "io/safetensors.h"
#include "model/adapter/adapter_detail.h"

namespace glm4::adapter_detail {
namespace fs = std::filesystem;

namespace {
bool parse_mlx_key(const std::string& key, std::string* module, AdapterPart* part) {
  GLM4_CHECK(key.find(".switch_mlp.") == std::string::npos, "adapters.safetensors: ", key,
             ": mlx-lm's glm4_moe adapters (LoRA on the stacked switch_mlp experts) are not "
             "supported yet");
  static const std::vector<std::pair<std::string, AdapterPart>> suffixes{
      {".lora_a", AdapterPart::A}, {".lora_b", AdapterPart::B}, {".m", AdapterPart::Magnitude}};
  for (const auto& [suffix, p] : suffixes) {
    if (key.size() <= suffix.size() ||
        key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    *part = p;
    *module = key.substr(0, key.size() - suffix.size());
    int64_t layer;
    std::string name;
    return parse_lora_module_path(*module, &layer, &name) && name != kFusedQkv &&
           !is_moe_module_path(*module);
  }
  return false;
}

std::string layer_list(const std::set<int64_t>& s) {
  std::string out;
  for (int64_t l : s) out.append(out.empty() ? "" : ",").append(std::to_string(l));
  return "{" + out + "}";
}

bool contiguous(const std::set<int64_t>& s) {
  return !s.empty() && *s.rbegin() - *s.begin() + 1 == int64_t(s.size());
}
}  // namespace

AdapterFile read_mlx(const fs::path& dir, bool with_tensors) {
  const fs::path cfg = dir / "adapter_config.json";
  const fs::path weights = dir / "adapters.safetensors";
  const std::string f = cfg.string();
  json j = read_json_object(cfg);
  AdapterFile a;
  a.info.format = "mlx";
  std::string type = get_string(j, "fine_tune_type", f, "lora");
  GLM4_CHECK(type == "lora" || type == "dora", f, ": fine_tune_type is \"", type,
             "\"; only lora and dora adapters are supported");
  a.info.lora.dora = type == "dora";
  a.chatglm = get_string(j, "model_type", f, "") == "chatglm";
  int64_t n = get_int(j, "num_layers", f);
  auto lp_it = j.find("lora_parameters");
  GLM4_CHECK(lp_it != j.end() && lp_it->is_object(), f,
             ": field \"lora_parameters\" is missing or ", "not an object");
  const json& lp = *lp_it;
  const std::string lf = f + ": lora_parameters";
  LoraConfig& l = a.info.lora;
  l.rank = get_int(lp, "rank", lf);
  GLM4_CHECK(l.rank > 0, lf, ": rank must be positive, got ", l.rank);
  a.info.scale = get_number(lp, "scale", lf);
  l.dropout = get_number(lp, "dropout", lf, 0.0);
  GLM4_CHECK(l.dropout >= 0 && l.dropout < 1, lf, ": dropout must be in [0, 1), got ", l.dropout);
  l.alpha = alpha_from_scale(a.info.scale, l.rank);
  l.use_rslora = false;
  a.info.base_model_name_or_path =
      get_string(j, "model", f, get_string(j, "base_model_name_or_path", f, ""));

  bool targets_from_config = false;
  if (auto it = lp.find("keys"); it != lp.end() && !it->is_null()) {
    GLM4_CHECK(it->is_array(), lf, ": keys must be a list, got ", it->dump());
    std::vector<std::string> names;
    for (const json& v : *it) {
      GLM4_CHECK(v.is_string(), lf, ": keys must hold strings, got ", v.dump());
      names.push_back(v.get<std::string>());
    }
    l.targets = canonical_targets(names, lf, "keys");
    targets_from_config = true;
  }
  read_tensors(a, weights, parse_mlx_key, true, targets_from_config, with_tensors);

  std::set<int64_t> present = a.layers_present();
  GLM4_CHECK(contiguous(present), weights.string(), ": holds LoRA tensors for layers ",
             layer_list(present), ", not the last num_layers layers");
  if (n <= 0)
    GLM4_CHECK(*present.begin() == 0, weights.string(), ": holds LoRA tensors for layers ",
               layer_list(present), " but ", f, " says num_layers ", n,
               ", which means every layer");
  else
    GLM4_CHECK(int64_t(present.size()) == n, weights.string(), ": holds LoRA tensors for ",
               present.size(), " layers ", layer_list(present), " but ", f, " says num_layers ", n);
  // The last N layers starting at layer 0 are all of them.
  if (n > 0 && *present.begin() > 0) a.info.layers.assign(present.begin(), present.end());
  l.num_layers = a.info.layers.empty() ? -1 : int64_t(a.info.layers.size());
  return a;
}

void write_mlx(const AdapterFile& in, const fs::path& dir) {
  AdapterFile a = in;
  for (const auto& [module, m] : a.modules)
    GLM4_CHECK(!is_moe_module_path(module), "adapter ", dir, ": ", module,
               " is a glm4_moe MLP module; mlx-lm's ",
               "adapter layout for glm4_moe (LoRA on the stacked switch_mlp experts) is not "
               "supported yet: keep ",
               "the PEFT layout");
  split_fused_qkv(a, "adapter " + dir.string());
  const LoraConfig& l = a.info.lora;
  std::set<int64_t> present = a.layers_present();
  GLM4_CHECK(contiguous(present), "adapter ", dir, ": LoRA modules on layers ", layer_list(present),
             "; the MLX layout can only say \"the last N layers\"");
  if (a.info.layers.empty()) {
    GLM4_CHECK(
        *present.begin() == 0 && (a.total_layers < 0 || a.total_layers == int64_t(present.size())),
        "adapter ", dir, ": said to adapt every layer but holds layers ", layer_list(present));
  } else {
    GLM4_CHECK(a.total_layers >= 0, "adapter ", dir, ": an MLX adapter adapts the last N layers; ",
               "to tell whether layers ", layer_list(present),
               " are the last ones, the base model's layer count is needed (give the base model)");
    GLM4_CHECK(*present.rbegin() == a.total_layers - 1, "adapter ", dir,
               ": LoRA modules on layers ", layer_list(present), " of ", a.total_layers,
               " are not the last N layers, which is all the MLX layout can say");
  }
  std::vector<std::vector<float>> transposed;
  transposed.reserve(2 * a.modules.size());
  std::vector<TensorToWrite> tensors;
  auto add = [&](const std::string& key, const Shape& shape, const std::vector<float>& v) {
    int64_t rows = shape[0], cols = shape[1];
    std::vector<float>& t = transposed.emplace_back(v.size());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t k = 0; k < cols; ++k) t[size_t(k * rows + i)] = v[size_t(i * cols + k)];
    tensors.push_back(f32_tensor(key, {cols, rows}, t.data()));
  };
  for (const auto& [module, m] : a.modules) {
    add(adapter_tensor_key("mlx", module, AdapterPart::A), m.a_shape, m.a);  // [in, r]
    add(adapter_tensor_key("mlx", module, AdapterPart::B), m.b_shape, m.b);  // [r, out]
    if (l.dora)
      tensors.push_back(f32_tensor(adapter_tensor_key("mlx", module, AdapterPart::Magnitude),
                                   m.magnitude_shape, m.magnitude.data()));
  }
  write_safetensors(dir / "adapters.safetensors", tensors, {{"format", "mlx"}});

  json keys = json::array();
  for (const std::string& t : l.targets) {
    std::string path = lora_module_path(0, t);
    keys.push_back(path.substr(std::string("model.layers.0.").size()));  // "self_attn.q_proj"
  }
  json j = json::object();
  j["fine_tune_type"] = l.dora ? "dora" : "lora";
  // Not an mlx-lm field: tells a later conversion to PEFT to use ChatGLM's module paths.
  if (a.chatglm) j["model_type"] = "chatglm";
  if (!a.info.base_model_name_or_path.empty()) j["model"] = a.info.base_model_name_or_path;
  j["num_layers"] = int64_t(present.size());
  j["lora_parameters"] = {
      {"rank", l.rank}, {"scale", a.info.scale}, {"dropout", l.dropout}, {"keys", keys}};
  write_file_atomic(dir / "adapter_config.json", j.dump(2) + "\n");
}

}  // namespace glm4::adapter_detail
