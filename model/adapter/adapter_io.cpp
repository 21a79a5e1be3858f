// Adapters and the model: collecting a model's LoRA modules for saving, and creating and filling
// them from an adapter directory with strict checks; conversion between the layouts.
#include "model/adapter/adapter_io.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "base/check.h"
#include "base/strings.h"
#include "model/adapter/adapter_detail.h"
#include "model/adapter/adapter_files.h"
#include "model/config.h"
#include "model/glm4_model.h"

namespace glm4 {
namespace fs = std::filesystem;

namespace {
// Why a module is missing, or a shape differs: the adapter belongs to another model.
std::string another_model(const AdapterInfo& info) {
  std::string out = ": the adapter was made for another model";
  if (!info.base_model_name_or_path.empty())
    out += " (base_model_name_or_path: " + info.base_model_name_or_path + ")";
  return out;
}

// Whether some target of `targets` adapts the linear at `path`.
bool targeted(const std::vector<std::string>& targets, const std::string& path) {
  for (const std::string& t : targets)
    if (lora_target_matches(t, path)) return true;
  return false;
}

// glm4_moe: the model's adapted linears are exactly the targeted ones on each adapted layer.
void check_moe_adapted(Glm4Model& model, const AdapterFile& a, const fs::path& dir) {
  const std::set<int64_t> layers = a.layers_present();
  const std::vector<std::string>& targets = a.info.lora.targets;
  model.visit_linears([&](const LinearSite& site, Linear&) {
    if (!layers.count(site.layer)) return;
    const bool has = a.modules.count(site.path) > 0, wanted = targeted(targets, site.path);
    GLM4_CHECK(has == wanted, "save_adapter ", dir, ": ", site.path,
               wanted ? " has no LoRA module but" : " has a LoRA module but",
               " the LoRA settings target ", join(targets),
               wanted ? " (its layer has other modules)" : "");
  });
}

std::string last_component(const fs::path& p) {
  fs::path n = p.lexically_normal();
  if (n.filename().empty()) n = n.parent_path();
  return n.filename().string();
}
}  // namespace

void check_adapter_layout(const ModelConfig& c, const LoraConfig& lora, const std::string& format) {
  check_adapter_format(format);
  if (is_moe_family(c)) {
    const std::vector<std::string> targets =
        resolve_lora_targets(lora.targets, true, has_latent_attention(c));
    GLM4_CHECK(
        format != "mlx" || std::find(targets.begin(), targets.end(), "kv_b_proj") == targets.end(),
        "--adapter-format mlx: LoRA target kv_b_proj: ", adapter_detail::kNoMlxKvB);
    return;
  }
  std::vector<std::string> targets = resolve_lora_targets(lora.targets);
  const bool chatglm = c.family == ModelConfig::Family::ChatGlm;
  GLM4_CHECK(chatglm || targets.front() != kFusedQkv, "LoRA target ", kFusedQkv,
             " is ChatGLM's fused q|k|v ", "projection; this ", family_name(c.family),
             " model has separate q_proj, k_proj, v_proj: target those");
  if (!chatglm || format != "peft") return;
  for (const char* separate : {"q_proj", "k_proj", "v_proj"})
    GLM4_CHECK(std::find(targets.begin(), targets.end(), separate) == targets.end(), "LoRA target ",
               separate,
               ": a ChatGLM checkpoint keeps q|k|v in one query_key_value matrix, and PEFT adapts "
               "it with one A; ",
               "target ", kFusedQkv,
               " for the PEFT layout, or use --adapter-format mlx for separate q/k/v adapters");
}

void save_adapter(Glm4Model& model, const LoraConfig& lora, const fs::path& dir,
                  const std::string& format, const std::string& base_model) {
  check_adapter_layout(model.config, lora, format);
  AdapterFile a;
  a.info.format = format;
  a.info.lora = lora;
  const bool moe = is_moe_family(model.config);
  a.info.lora.targets = resolve_lora_targets(lora.targets, moe, has_latent_attention(model.config));
  if (moe) {  // only kinds the model has: all-linear on latent attention names no k_proj / v_proj
    std::vector<std::string>& targets = a.info.lora.targets;
    std::set<std::string> present;
    model.visit_linears([&](const LinearSite& site, Linear&) {
      for (const std::string& t : targets)
        if (lora_target_matches(t, site.path)) present.insert(t);
    });
    std::erase_if(targets, [&](const std::string& t) { return !present.count(t); });
  }
  a.info.base_model_name_or_path = base_model;
  a.info.scale = lora.scale();
  a.total_layers = int64_t(model.layers.size());
  a.chatglm = model.config.family == ModelConfig::Family::ChatGlm;
  if (moe) a.num_experts = model.config.n_routed_experts;
  if (a.chatglm) a.qkv_rows = qkv_rows_of(model.config);
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
    GLM4_CHECK(w.dora() == lora.dora, "save_adapter: ", path, w.dora() ? " is" : " is not",
               " a DoRA adapter but the LoRA settings say", lora.dora ? "" : " not", " DoRA");
    names.insert(name);
    AdapterModule& m = a.modules[path];
    m.a_shape = w.lora_A.shape();
    m.b_shape = w.lora_B.shape();
    m.a.assign(w.lora_A.data(), w.lora_A.data() + w.lora_A.numel());
    m.b.assign(w.lora_B.data(), w.lora_B.data() + w.lora_B.numel());
    if (w.dora()) {
      m.magnitude_shape = w.magnitude.shape();
      m.magnitude.assign(w.magnitude.data(), w.magnitude.data() + w.magnitude.numel());
    }
  });
  GLM4_CHECK(!a.modules.empty(), "save_adapter ", dir, ": the model has no LoRA modules");
  if (moe) {
    check_moe_adapted(model, a, dir);
    std::set<int64_t> layers = a.layers_present();
    if (int64_t(layers.size()) != a.total_layers)
      a.info.layers.assign(layers.begin(), layers.end());
    a.info.lora.num_layers = a.info.layers.empty() ? -1 : int64_t(layers.size());
    write_adapter_file(a, dir, format);
    return;
  }
  std::vector<std::string> expected, found;
  for (const std::string& t : a.info.lora.targets)
    for (const std::string& n : lora_target_linears(t)) expected.push_back(n);
  for (const std::string& n : expected)
    if (names.count(n)) found.push_back(n);
  GLM4_CHECK(found == expected && names.size() == found.size(), "save_adapter ", dir,
             ": the model's LoRA modules are ",
             join(std::vector<std::string>(names.begin(), names.end())),
             " but the LoRA settings target ", join(a.info.lora.targets));
  std::set<int64_t> layers = a.layers_present();
  for (int64_t layer : layers)
    for (const std::string& t : found)
      GLM4_CHECK(a.modules.count(lora_module_path(layer, t)), "save_adapter ", dir, ": layer ",
                 layer, " has LoRA modules but none on ", t);
  // The file holds q/k/v split; the PEFT writer joins them back into query_key_value.
  if (a.info.lora.targets.front() == kFusedQkv) {
    a.info.lora.targets.erase(a.info.lora.targets.begin());
    a.info.lora.targets.insert(a.info.lora.targets.begin(), {"q_proj", "k_proj", "v_proj"});
  }
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
  const bool moe = is_moe_family(model.config);
  GLM4_CHECK(moe || !std::any_of(a.modules.begin(), a.modules.end(),
                                 [](const auto& m) { return is_moe_module_path(m.first); }),
             wfile,
             ": holds adapters of glm4_moe modules (experts, gate_proj, up_proj) but the model is ",
             family_name(model.config.family), another_model(info));

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

  GLM4_CHECK(!a.chatglm || model.config.family == ModelConfig::Family::ChatGlm, wfile,
             ": the adapter was made for a ChatGLM checkpoint (its keys name "
             "transformer.encoder.layers), but the ",
             "model is ", family_name(model.config.family), another_model(info));
  if (model.config.family == ModelConfig::Family::ChatGlm) a.qkv_rows = qkv_rows_of(model.config);
  // Every linear once, by path (a glm4_moe model has thousands).
  std::map<std::string, Linear*> linears;
  model.visit_linears([&](const LinearSite& site, Linear& lin) { linears[site.path] = &lin; });
  auto find_linear = [&](const std::string& path) -> Linear* {
    auto it = linears.find(path);
    return it == linears.end() ? nullptr : it->second;
  };
  // The modules the adapter must hold: each target on each adapted layer, and for glm4_moe
  // every linear a target names there (each routed expert its own module).
  struct Expected {
    std::string path;
    std::vector<std::string>
        linears;  // the model linears the module adapts (q/k/v for a fused one)
  };
  std::vector<Expected> expected;
  if (moe) {
    model.visit_linears([&](const LinearSite& site, Linear&) {
      if (layers.count(site.layer) && targeted(info.lora.targets, site.path))
        expected.push_back({site.path, {site.path}});
    });
  } else {
    for (int64_t layer : layers)
      for (const std::string& t : info.lora.targets) {
        Expected e{lora_module_path(layer, t), {}};
        for (const std::string& n : lora_target_linears(t))
          e.linears.push_back(lora_module_path(layer, n));
        expected.push_back(std::move(e));
      }
  }
  // Check everything before touching the model, so a bad adapter leaves it as it was.
  std::vector<std::string> missing;
  for (const Expected& e : expected) {
    const std::string& path = e.path;
    auto it = a.modules.find(path);
    if (it == a.modules.end()) {
      missing.push_back(adapter_tensor_key(info.format, path, AdapterPart::A, a.chatglm));
      continue;
    }
    int64_t in = 0, out = 0;
    for (const std::string& n : e.linears) {
      const Linear* lin = find_linear(n);
      GLM4_CHECK(lin, "adapter ", dir, ": no module ", n, " in the model");
      in = lin->in_features;
      out += lin->out_features;
    }
    const AdapterModule& m = it->second;
    bool mlx = info.format == "mlx";
    auto check = [&](AdapterPart part, Shape found, Shape expected) {
      std::string stacked;
      int64_t e;
      // Report in the file's own orientation (mlx-lm's stacked experts have PEFT's).
      if (mlx && found.size() == 2 && !adapter_detail::split_expert_path(path, &stacked, &e)) {
        std::swap(found[0], found[1]);
        std::swap(expected[0], expected[1]);
      }
      GLM4_CHECK(found == expected, wfile, ": ",
                 adapter_tensor_key(info.format, path, part, a.chatglm), " has shape ",
                 shape_str(found), ", expected ", shape_str(expected), " for ", path,
                 " of this model", another_model(info));
    };
    check(AdapterPart::A, m.a_shape, {info.lora.rank, in});
    check(AdapterPart::B, m.b_shape, {out, info.lora.rank});
    if (info.lora.dora) check(AdapterPart::Magnitude, m.magnitude_shape, {out});
    GLM4_CHECK(!info.lora.dora || !moe ||
                   std::string(lora_module_parent(path.substr(path.rfind('.') + 1))) != "mlp",
               wfile, ": DoRA on glm4_moe's MLP and expert linears (", path, ") is not supported");
  }
  if (moe && expected.size() != a.modules.size()) {
    std::set<std::string> wanted;
    for (const Expected& e : expected) wanted.insert(e.path);
    for (const auto& [path, m] : a.modules)
      GLM4_CHECK(wanted.count(path), wfile, ": ",
                 adapter_tensor_key(info.format, path, AdapterPart::A),
                 " is no module of this model", another_model(info));
  }
  if (!missing.empty()) {
    std::string list;
    for (size_t i = 0; i < missing.size() && i < 20; ++i) list += "\n  " + missing[i];
    fail(wfile, ": ", missing.size(), " adapted module(s) missing", another_model(info), ":", list);
  }

  // Fused q|k|v: one A shared by the three linears, B and m cut by their rows.
  std::set<std::string> fused_paths;
  for (const auto& [path, m] : a.modules) {
    int64_t layer;
    std::string name;
    if (parse_lora_module_path(path, &layer, &name) && name == kFusedQkv) fused_paths.insert(path);
  }
  split_fused_qkv(a, wfile);
  std::mt19937_64 unused_rng(0);
  for (auto& [path, m] : a.modules) {
    Linear* lin = find_linear(path);
    std::unique_ptr<LoraWeights>& w = target(*lin);
    w = lin->make_lora(info.lora.rank, float(info.scale), float(info.lora.dropout), unused_rng);
    std::memcpy(w->lora_A.data(), m.a.data(), m.a.size() * sizeof(float));
    std::memcpy(w->lora_B.data(), m.b.data(), m.b.size() * sizeof(float));
    if (info.lora.dora) {
      w->magnitude = Tensor::from({int64_t(m.magnitude.size())}, m.magnitude);
      w->magnitude.set_requires_grad(true);
    }
  }
  // k_proj and v_proj of a fused query_key_value take q_proj's A tensor (and its dropout mask).
  for (auto& [path, m] : a.modules) {
    int64_t layer;
    std::string name;
    parse_lora_module_path(path, &layer, &name);
    if (!fused_paths.count(lora_module_path(layer, kFusedQkv)) ||
        (name != "k_proj" && name != "v_proj"))
      continue;
    Linear* lin = find_linear(path);
    Linear* q = find_linear(lora_module_path(layer, "q_proj"));
    LoraWeights& w = *target(*lin);
    w.lora_A = target(*q)->lora_A;
    w.dropout_slot = q->seed_slot;
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
  GLM4_CHECK(model.lora_parameters().empty(), "adapter ", dir,
             ": the model already has LoRA modules");
  return load_into(model, dir, model_dir,
                   [](Linear& lin) -> std::unique_ptr<LoraWeights>& { return lin.lora; });
}

std::string load_resident_adapter(Glm4Model& model, const fs::path& dir, size_t slot,
                                  const fs::path& model_dir) {
  model.visit_linears([&](const LinearSite& site, Linear& lin) {
    GLM4_CHECK(lin.resident.size() <= slot || !lin.resident[slot], "adapter ", dir,
               ": resident slot ", slot, " of ", site.path, " is taken");
  });
  GLM4_CHECK(!read_adapter_info(dir).lora.dora, "adapter ", dir,
             ": a DoRA adapter rescales the whole ",
             "weight, so it cannot be added per request beside others; load it alone (--adapter) "
             "or fuse it");
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
  const bool needs_base = (!a.info.layers.empty() || a.chatglm) && to_format == "mlx";
  if (base.empty() && needs_base &&
      fs::exists(fs::path(a.info.base_model_name_or_path) / "config.json", ec))
    base = a.info.base_model_name_or_path;
  if (!base.empty()) {
    const ModelConfig config = load_model_config(base);
    a.total_layers = config.num_hidden_layers;
    // The base model says which naming the PEFT layout uses and how q|k|v split.
    if (config.family == ModelConfig::Family::ChatGlm) {
      a.chatglm = true;
      a.qkv_rows = qkv_rows_of(config);
    } else {
      GLM4_CHECK(!a.chatglm, "adapter ", in_dir,
                 ": made for a ChatGLM checkpoint, but the base model ", base, " is ",
                 family_name(config.family));
    }
    for (int64_t layer : a.layers_present())
      GLM4_CHECK(layer < a.total_layers, "adapter ", in_dir, ": holds LoRA tensors for layer ",
                 layer, " but the base model ", base, " has ", a.total_layers, " layers");
    if (is_moe_family(config)) {
      GLM4_CHECK(a.num_experts < 0 || a.num_experts == config.n_routed_experts, "adapter ", in_dir,
                 ": stacks ", a.num_experts, " experts but the base model ", base, " has ",
                 config.n_routed_experts);
      a.num_experts = config.n_routed_experts;
    }
    if (a.info.base_model_name_or_path.empty()) a.info.base_model_name_or_path = base.string();
  }
  a.info.format = to_format;
  write_adapter_file(a, out_dir, to_format);
}

}  // namespace glm4
