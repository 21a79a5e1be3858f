// Adapters and the model: collecting a model's LoRA modules for saving, and creating and filling
// them from an adapter directory with strict checks; conversion between the layouts.
#include "model/adapter/adapter_io.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "base/check.h"
#include "base/strings.h"
#include "model/config.h"
#include "model/glm4_model.h"
#include "model/adapter/adapter_files.h"

namespace glm4 {
namespace fs = std::filesystem;

namespace {
std::vector<std::string> canonical(const std::vector<std::string>& targets) {
  std::vector<std::string> resolved = resolve_lora_targets(targets), out;
  for (const std::string& n : lora_module_names())
    if (std::find(resolved.begin(), resolved.end(), n) != resolved.end()) out.push_back(n);
  return out;
}

// Why a module is missing, or a shape differs: the adapter belongs to another model.
std::string another_model(const AdapterInfo& info) {
  std::string out = ": the adapter was made for another model";
  if (!info.base_model_name_or_path.empty())
    out += " (base_model_name_or_path: " + info.base_model_name_or_path + ")";
  return out;
}

std::string last_component(const fs::path& p) {
  fs::path n = p.lexically_normal();
  if (n.filename().empty()) n = n.parent_path();
  return n.filename().string();
}
}  // namespace

void save_adapter(Glm4Model& model, const LoraConfig& lora, const fs::path& dir,
                  const std::string& format, const std::string& base_model) {
  check_adapter_format(format);
  GLM4_CHECK(model.config.family != ModelConfig::Family::ChatGlm || format == "mlx", "adapter ", dir,
             ": a PEFT adapter for a ChatGLM checkpoint would have to adapt its fused ",
             "query_key_value matrix; saving one is not supported, use the mlx format");
  AdapterFile a;
  a.info.format = format;
  a.info.lora = lora;
  a.info.lora.targets = canonical(lora.targets);
  a.info.base_model_name_or_path = base_model;
  a.info.scale = lora.scale();
  a.total_layers = int64_t(model.layers.size());
  std::set<std::string> names;
  model.visit_linears([&](const LinearSite& site, Linear& lin) {
    if (!lin.lora) return;
    const LoraWeights& w = *lin.lora;
    const std::string& path = site.path;
    const std::string& name = site.name;
    GLM4_CHECK(w.lora_A.dim(0) == lora.rank, "save_adapter: ", path, " has rank ", w.lora_A.dim(0),
               " but the LoRA settings say ", lora.rank);
    GLM4_CHECK(std::abs(double(w.scale) - lora.scale()) <= 1e-6 * std::abs(lora.scale()),
               "save_adapter: ", path, " has scale ", w.scale, " but the LoRA settings give ",
               lora.scale());
    names.insert(name);
    AdapterModule& m = a.modules[path];
    m.a_shape = w.lora_A.shape();
    m.b_shape = w.lora_B.shape();
    m.a.assign(w.lora_A.data(), w.lora_A.data() + w.lora_A.numel());
    m.b.assign(w.lora_B.data(), w.lora_B.data() + w.lora_B.numel());
  });
  GLM4_CHECK(!a.modules.empty(), "save_adapter ", dir, ": the model has no LoRA modules");
  std::vector<std::string> found;
  for (const std::string& n : lora_module_names())
    if (names.count(n)) found.push_back(n);
  GLM4_CHECK(found == a.info.lora.targets, "save_adapter ", dir, ": the model's LoRA modules are ",
             join(found), " but the LoRA settings target ", join(a.info.lora.targets));
  std::set<int64_t> layers = a.layers_present();
  for (int64_t layer : layers)
    for (const std::string& t : found)
      GLM4_CHECK(a.modules.count(lora_module_path(layer, t)), "save_adapter ", dir, ": layer ", layer,
                 " has LoRA modules but none on ", t);
  if (int64_t(layers.size()) != a.total_layers) a.info.layers.assign(layers.begin(), layers.end());
  a.info.lora.num_layers = a.info.layers.empty() ? -1 : int64_t(layers.size());
  write_adapter_file(a, dir, format);
}

AdapterInfo read_adapter_info(const fs::path& dir) { return read_adapter_file(dir, false).info; }

namespace {
// What load_adapter and load_resident_adapter share: read, check everything against the model,
// then fill the adapter pointer `target` gives for each adapted linear.
using AdapterTarget = std::function<std::unique_ptr<LoraWeights>&(Linear&)>;

std::string load_into(Glm4Model& model, const fs::path& dir, const fs::path& model_dir,
                      const AdapterTarget& target) {
  AdapterFile a = read_adapter_file(dir);
  const AdapterInfo& info = a.info;
  const std::string wfile = (dir / adapter_weights_file(info.format)).string();
  const int64_t L = int64_t(model.layers.size());

  std::set<int64_t> layers;
  if (info.layers.empty())
    for (int64_t i = 0; i < L; ++i) layers.insert(i);
  else
    layers.insert(info.layers.begin(), info.layers.end());
  for (int64_t layer : a.layers_present())
    GLM4_CHECK(layer < L, wfile, ": holds LoRA tensors for layer ", layer, " but the model has ", L,
               " layers", another_model(info));
  if (info.format == "mlx" && !info.layers.empty())
    GLM4_CHECK(*layers.rbegin() == L - 1, wfile, ": an MLX adapter adapts the last ", layers.size(),
               " layers; this one holds layers ", *layers.begin(), "..", *layers.rbegin(),
               " but the model has ", L, " layers", another_model(info));

  // Check everything before touching the model, so a bad adapter leaves it as it was.
  std::vector<std::string> missing;
  for (int64_t layer : layers)
    for (const std::string& t : info.lora.targets) {
      std::string path = lora_module_path(layer, t);
      auto it = a.modules.find(path);
      if (it == a.modules.end()) {
        missing.push_back(adapter_tensor_key(info.format, path, true));
        continue;
      }
      const Linear* lin = model.find_linear(path);
      GLM4_CHECK(lin, "adapter ", dir, ": no module ", path, " in the model");
      const AdapterModule& m = it->second;
      bool mlx = info.format == "mlx";
      auto check = [&](bool is_a, Shape found, Shape expected) {
        if (mlx) {  // report in the file's own orientation
          std::swap(found[0], found[1]);
          std::swap(expected[0], expected[1]);
        }
        GLM4_CHECK(found == expected, wfile, ": ", adapter_tensor_key(info.format, path, is_a),
                   " has shape ", shape_str(found), ", expected ", shape_str(expected), " for ",
                   path, " of this model", another_model(info));
      };
      check(true, m.a_shape, {info.lora.rank, lin->in_features});
      check(false, m.b_shape, {lin->out_features, info.lora.rank});
    }
  if (!missing.empty()) {
    std::string list;
    for (size_t i = 0; i < missing.size() && i < 20; ++i) list += "\n  " + missing[i];
    fail(wfile, ": ", missing.size(), " adapted module(s) missing", another_model(info), ":", list);
  }

  std::mt19937_64 unused_rng(0);
  for (auto& [path, m] : a.modules) {
    Linear* lin = model.find_linear(path);
    std::unique_ptr<LoraWeights>& w = target(*lin);
    w = lin->make_lora(info.lora.rank, float(info.scale), float(info.lora.dropout), unused_rng);
    std::memcpy(w->lora_A.data(), m.a.data(), m.a.size() * sizeof(float));
    std::memcpy(w->lora_B.data(), m.b.data(), m.b.size() * sizeof(float));
  }

  const std::string& base = info.base_model_name_or_path;
  if (base.empty() || model_dir.empty()) return "";
  std::error_code ec;
  bool same = base == model_dir.string() || last_component(base) == last_component(model_dir) ||
              (fs::exists(base, ec) && fs::equivalent(base, model_dir, ec));
  if (same) return "";
  return str_cat("adapter ", dir.string(), " was made for base model \"", base, "\", not ",
                 model_dir.string());
}
}  // namespace

std::string load_adapter(Glm4Model& model, const fs::path& dir, const fs::path& model_dir) {
  GLM4_CHECK(model.lora_parameters().empty(), "adapter ", dir, ": the model already has LoRA modules");
  return load_into(model, dir, model_dir, [](Linear& lin) -> std::unique_ptr<LoraWeights>& { return lin.lora; });
}

std::string load_resident_adapter(Glm4Model& model, const fs::path& dir, size_t slot,
                                  const fs::path& model_dir) {
  model.visit_linears([&](const LinearSite& site, Linear& lin) {
    GLM4_CHECK(lin.resident.size() <= slot || !lin.resident[slot], "adapter ", dir, ": resident slot ",
               slot, " of ", site.path, " is taken");
  });
  return load_into(model, dir, model_dir, [slot](Linear& lin) -> std::unique_ptr<LoraWeights>& {
    if (lin.resident.size() <= slot) lin.resident.resize(slot + 1);
    return lin.resident[slot];
  });
}

void convert_adapter(const fs::path& in_dir, const fs::path& out_dir, const std::string& to_format,
                     const fs::path& base_model_dir) {
  check_adapter_format(to_format);
  AdapterFile a = read_adapter_file(in_dir);
  fs::path base = base_model_dir;
  std::error_code ec;
  if (base.empty() && to_format == "mlx" && !a.info.layers.empty() &&
      fs::exists(fs::path(a.info.base_model_name_or_path) / "config.json", ec))
    base = a.info.base_model_name_or_path;
  if (!base.empty()) {
    a.total_layers = load_model_config(base).num_hidden_layers;
    for (int64_t layer : a.layers_present())
      GLM4_CHECK(layer < a.total_layers, "adapter ", in_dir, ": holds LoRA tensors for layer ", layer,
                 " but the base model ", base, " has ", a.total_layers, " layers");
    if (a.info.base_model_name_or_path.empty()) a.info.base_model_name_or_path = base.string();
  }
  a.info.format = to_format;
  write_adapter_file(a, out_dir, to_format);
}

}  // namespace glm4
