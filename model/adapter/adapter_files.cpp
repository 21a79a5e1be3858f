// Adapter files independent of the layout: module paths, layout detection, the tensor reader
// and the checks shared by PEFT and MLX, and typed JSON fields.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

#include "base/check.h"
#include "io/file/json_file.h"
#include "io/safetensors.h"
#include "model/adapter/adapter_detail.h"
#include "model/key_layout.h"

namespace glm4 {
namespace fs = std::filesystem;

namespace {
fs::path dir_of(const fs::path& file) { return file.parent_path(); }
}  // namespace

std::set<int64_t> AdapterFile::layers_present() const {
  std::set<int64_t> out;
  for (const auto& [path, m] : modules) {
    int64_t layer;
    std::string name;
    if (parse_lora_module_path(path, &layer, &name)) out.insert(layer);
  }
  return out;
}

const char* adapter_weights_file(const std::string& format) {
  return format == "mlx" ? "adapters.safetensors" : "adapter_model.safetensors";
}

std::string adapter_tensor_key(const std::string& format, const std::string& module,
                               AdapterPart part, bool chatglm) {
  std::string stacked;
  int64_t expert;
  if (format == "mlx" && adapter_detail::split_expert_path(module, &stacked, &expert))
    return stacked + (part == AdapterPart::A ? ".lora_a[" : ".lora_b[") + std::to_string(expert) +
           "]";  // one expert of mlx-lm's stacked tensor
  if (format == "mlx")
    return module + (part == AdapterPart::A   ? ".lora_a"
                     : part == AdapterPart::B ? ".lora_b"
                                              : ".m");
  std::string path = module;
  int64_t layer;
  std::string name;
  if (chatglm && parse_lora_module_path(module, &layer, &name) && name != "q_proj" &&
      name != "k_proj" && name != "v_proj")
    path = chatglm_module_path(layer, name);
  return "base_model.model." + path +
         (part == AdapterPart::A   ? ".lora_A.weight"
          : part == AdapterPart::B ? ".lora_B.weight"
                                   : ".lora_magnitude_vector");
}

std::string check_adapter_format(const std::string& format) {
  GLM4_CHECK(format == "peft" || format == "mlx", "unknown adapter format \"", format,
             "\": expected peft or mlx");
  return format;
}

std::string detect_adapter_format(const fs::path& dir) {
  GLM4_CHECK(fs::is_directory(dir), "adapter ", dir, ": not a directory");
  bool peft = fs::exists(dir / "adapter_model.safetensors");
  bool mlx = fs::exists(dir / "adapters.safetensors");
  if (peft && mlx) {
    // Both weight files: the config says which one it describes.
    adapter_detail::json j = adapter_detail::read_json_object(dir / "adapter_config.json");
    return j.contains("peft_type") ? "peft" : "mlx";
  }
  if (peft) return "peft";
  if (mlx) return "mlx";
  if (fs::exists(dir / "adapter_model.bin"))
    fail("adapter ", dir, ": adapter_model.bin (a PyTorch pickle) is not supported; save the ",
         "adapter with safe_serialization=True to get adapter_model.safetensors");
  fail("adapter ", dir, ": neither adapter_model.safetensors (PEFT) nor adapters.safetensors ",
       "(MLX) is there");
}

AdapterFile read_adapter_file(const fs::path& dir, bool with_tensors) {
  std::string format = detect_adapter_format(dir);
  GLM4_CHECK(fs::exists(dir / "adapter_config.json"), "adapter ", dir,
             ": adapter_config.json is missing");
  return format == "peft" ? adapter_detail::read_peft(dir, with_tensors)
                          : adapter_detail::read_mlx(dir, with_tensors);
}

void write_adapter_file(const AdapterFile& a, const fs::path& dir, const std::string& format) {
  check_adapter_format(format);
  GLM4_CHECK(!a.modules.empty(), "adapter ", dir, ": no LoRA modules to write");
  std::error_code ec;
  fs::create_directories(dir, ec);
  GLM4_CHECK(!ec, "adapter ", dir, ": cannot create the directory: ", ec.message());
  if (format == "peft")
    adapter_detail::write_peft(a, dir);
  else
    adapter_detail::write_mlx(a, dir);
  // The other layout's weights from an earlier save would make the directory ambiguous.
  fs::remove(dir / adapter_weights_file(format == "peft" ? "mlx" : "peft"), ec);
}

namespace adapter_detail {

json read_json_object(const fs::path& path) {
  json j = read_json_file(path);
  GLM4_CHECK(j.is_object(), path.string(), ": expected a JSON object");
  return j;
}

namespace {
const json* field(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}
}  // namespace

int64_t get_int(const json& j, const char* key, const std::string& file,
                std::optional<int64_t> def) {
  const json* v = field(j, key);
  if (!v) {
    GLM4_CHECK(def.has_value(), file, ": field \"", key, "\" is missing");
    return *def;
  }
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
      std::abs(v->get<double>()) < 9e15)
    return int64_t(v->get<double>());
  fail(file, ": field \"", key, "\" must be an integer, got ", v->dump());
}

double get_number(const json& j, const char* key, const std::string& file,
                  std::optional<double> def) {
  const json* v = field(j, key);
  if (!v) {
    GLM4_CHECK(def.has_value(), file, ": field \"", key, "\" is missing");
    return *def;
  }
  GLM4_CHECK(v->is_number(), file, ": field \"", key, "\" must be a number, got ", v->dump());
  double d = v->get<double>();
  GLM4_CHECK(std::isfinite(d), file, ": field \"", key, "\" must be finite");
  return d;
}

bool get_bool(const json& j, const char* key, const std::string& file, std::optional<bool> def) {
  const json* v = field(j, key);
  if (!v) {
    GLM4_CHECK(def.has_value(), file, ": field \"", key, "\" is missing");
    return *def;
  }
  GLM4_CHECK(v->is_boolean(), file, ": field \"", key, "\" must be true or false, got ", v->dump());
  return v->get<bool>();
}

std::string get_string(const json& j, const char* key, const std::string& file,
                       std::optional<std::string> def) {
  const json* v = field(j, key);
  if (!v) {
    GLM4_CHECK(def.has_value(), file, ": field \"", key, "\" is missing");
    return *def;
  }
  GLM4_CHECK(v->is_string(), file, ": field \"", key, "\" must be a string, got ", v->dump());
  return v->get<std::string>();
}

json number_json(double v) {
  if (std::floor(v) == v && std::abs(v) < 9e15) return int64_t(v);
  return v;
}

double alpha_from_scale(double scale, int64_t rank) {
  double alpha = scale * double(rank);
  double nearest = std::round(alpha);
  if (std::abs(alpha - nearest) <= 1e-9 * std::max(1.0, std::abs(alpha))) return nearest;
  return alpha;
}

std::vector<std::string> canonical_targets(const std::vector<std::string>& names,
                                           const std::string& file, const char* field_name) {
  if (names_moe_targets(names)) {  // glm4_moe: qualified names narrow the MLP kinds
    try {
      return resolve_lora_targets(names, true);
    } catch (const Error& e) {
      fail(file, ": ", field_name, ": ", e.what());
    }
  }
  std::vector<std::string> bare;
  for (const std::string& n : names) {
    size_t dot = n.rfind('.');
    std::string leaf = dot == std::string::npos ? n : n.substr(dot + 1);
    // A parent prefix ("self_attn.q_proj" as mlx-lm writes its keys, "self_attention.dense" in
    // ChatGLM's naming) must be the real parent.
    std::string parent = dot == std::string::npos ? "" : n.substr(0, dot);
    const bool attention = std::string(lora_module_parent(leaf)) == "self_attn" || leaf == "dense";
    if (!parent.empty() && parent != (attention ? "self_attn" : "mlp") &&
        parent != (attention ? "self_attention" : "mlp"))
      fail(file, ": ", field_name, ": \"", n, "\" is not a module of a GLM-4 decoder layer");
    bare.push_back(leaf);
  }
  try {
    return resolve_lora_targets(bare);
  } catch (const Error& e) {
    fail(file, ": ", field_name, ": ", e.what());
  }
}

namespace {
// glm4_moe adapters: the targets come from the config or, kind by kind, from the modules; every
// module is a target; each adapted layer has every attention target, and each adapted MLP (dense,
// shared or one routed expert) every projection the targets give it. Whether every expert of the
// model is there is checked against the model when loading.
void check_moe_modules(AdapterFile& a, const std::string& fname, bool targets_from_config) {
  auto key = [&](const std::string& module) {
    return adapter_tensor_key(a.info.format, module, AdapterPart::A);
  };
  if (!targets_from_config) {
    std::set<std::string> kinds;
    for (const auto& [module, m] : a.modules) kinds.insert(qualified_lora_target(module));
    a.info.lora.targets = canonical_targets({kinds.begin(), kinds.end()}, fname, "keys");
  }
  const std::vector<std::string>& targets = a.info.lora.targets;
  auto targeted = [&](const std::string& path) {
    return std::any_of(targets.begin(), targets.end(),
                       [&](const std::string& t) { return lora_target_matches(t, path); });
  };
  std::vector<std::string> missing;
  std::set<std::string> owners;
  for (const auto& [module, m] : a.modules) {
    GLM4_CHECK(targeted(module), fname, ": holds LoRA tensors for ", module,
               ", which adapter_config.json does not list as a target");
    owners.insert(module.substr(0, module.rfind('.')));
  }
  // An attention kind the file holds nowhere may be one the architecture lacks (PEFT lists
  // k_proj for GLM-4.7-Flash, whose latent attention has none); against the model, load_adapter
  // checks every linear a target names.
  std::set<std::string> attention_kinds;
  for (const auto& [module, m] : a.modules)
    if (module.find(".self_attn.") != std::string::npos)
      attention_kinds.insert(module.substr(module.rfind('.') + 1));
  for (int64_t layer : a.layers_present())
    for (const char* n : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
      const std::string path = lora_module_path(layer, n);
      if (attention_kinds.count(n) && targeted(path) && !a.modules.count(path))
        missing.push_back(key(path));
    }
  for (const std::string& owner : owners) {
    if (owner.ends_with(".self_attn")) continue;
    for (const char* n : {"gate_proj", "up_proj", "down_proj"}) {
      const std::string path = owner + "." + n;
      if (targeted(path) && !a.modules.count(path)) missing.push_back(key(path));
    }
  }
  if (!missing.empty()) {
    std::string list;
    for (size_t i = 0; i < missing.size() && i < 20; ++i) list += "\n  " + missing[i];
    fail(fname, ": ", missing.size(), " target module(s) missing on adapted layers:", list);
  }
}
}  // namespace

void read_tensors(AdapterFile& a, const fs::path& path, const KeyParser& parse, bool transposed,
                  bool targets_from_config, bool with_tensors) {
  auto file = SafetensorsFile::open(path);
  const std::string fname = path.string();
  const std::string& format = a.info.format;
  const int64_t r = a.info.lora.rank;
  const bool dora = a.info.lora.dora;
  auto key = [&](const std::string& module, AdapterPart part) {
    return adapter_tensor_key(format, module, part, a.chatglm);
  };
  std::vector<std::string> unexpected;
  std::map<std::string, int> seen;  // module -> bit 1: A, bit 2: B, bit 4: magnitude
  for (const TensorInfo& t : file->tensors()) {
    std::string module;
    AdapterPart part = AdapterPart::A;
    if (!parse(t.name, &module, &part)) {
      unexpected.push_back(t.name);
      continue;
    }
    t.float_dtype();  // throws naming the tensor for non-float dtypes
    if (is_switch_module(module)) {
      read_switch_tensor(a, t, module, part, with_tensors, fname, seen);
      continue;
    }
    AdapterModule& m = a.modules[module];
    if (part == AdapterPart::Magnitude) {
      GLM4_CHECK(dora, fname, ": ", t.name, " is a DoRA magnitude but ",
                 (dir_of(path) / "adapter_config.json").string(),
                 " does not say the adapter is DoRA (",
                 format == "mlx" ? "fine_tune_type \"dora\"" : "use_dora: true", ")");
      GLM4_CHECK(t.shape.size() == 1, fname, ": ", t.name, " has shape ", shape_str(t.shape),
                 ", expected a vector [out]");
      seen[module] |= 4;
      m.magnitude_shape = t.shape;
      if (with_tensors) m.magnitude = read_f32(t);
      continue;
    }
    const bool is_a = part == AdapterPart::A;
    GLM4_CHECK(t.shape.size() == 2, fname, ": ", t.name, " has shape ", shape_str(t.shape),
               ", expected a matrix");
    Shape shape = t.shape;
    if (transposed) std::swap(shape[0], shape[1]);  // MLX [in, r] / [r, out] -> [r, in] / [out, r]
    int64_t rank_dim = is_a ? shape[0] : shape[1];
    GLM4_CHECK(rank_dim == r, fname, ": ", t.name, " has shape ", shape_str(t.shape), ": its rank ",
               rank_dim, " is not the config's rank ", r);
    seen[module] |= is_a ? 1 : 2;
    std::vector<float> values;
    if (with_tensors) {
      std::vector<float> raw = read_f32(t);
      if (transposed) {
        values.resize(raw.size());
        int64_t rows = t.shape[0], cols = t.shape[1];
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j)
            values[size_t(j * rows + i)] = raw[size_t(i * cols + j)];
      } else {
        values = std::move(raw);
      }
    }
    (is_a ? m.a_shape : m.b_shape) = shape;
    (is_a ? m.a : m.b) = std::move(values);
  }
  if (!unexpected.empty()) {
    std::sort(unexpected.begin(), unexpected.end());
    std::string list;
    for (size_t i = 0; i < unexpected.size() && i < 20; ++i) list += "\n  " + unexpected[i];
    std::string example =
        a.chatglm ? lora_module_path(0, kFusedQkv) : "model.layers.N.self_attn.q_proj";
    fail(fname, ": ", unexpected.size(), " key(s) that are not LoRA tensors of a GLM-4 layer (",
         "expected ", key(example, AdapterPart::A), " and the like):", list);
  }
  GLM4_CHECK(!a.modules.empty(), fname, ": holds no LoRA tensors");
  for (const auto& [module, bits] : seen) {
    GLM4_CHECK((bits & 3) == 3, fname, ": ",
               key(module, (bits & 1) ? AdapterPart::B : AdapterPart::A), " is missing (",
               key(module, (bits & 1) ? AdapterPart::A : AdapterPart::B), " is there)");
    GLM4_CHECK(!dora || (bits & 4), fname, ": ", key(module, AdapterPart::Magnitude),
               " is missing; a DoRA adapter ", "has a magnitude for every adapted module");
  }
  for (const auto& [module, m] : a.modules)
    GLM4_CHECK(m.magnitude_shape.empty() || m.magnitude_shape[0] == m.b_shape[0], fname, ": ",
               key(module, AdapterPart::Magnitude), " has shape ", shape_str(m.magnitude_shape),
               " but ", key(module, AdapterPart::B), " has ", m.b_shape[0], " rows");

  bool moe = false;
  for (const auto& [module, m] : a.modules)
    moe |= is_moe_module_path(module) || is_latent_attention_path(module);
  if (moe) {
    check_moe_modules(a, fname, targets_from_config);
    return;
  }
  for (const std::string& t : a.info.lora.targets)
    GLM4_CHECK(!names_moe_targets({t}), (dir_of(path) / "adapter_config.json").string(), ": ",
               format == "mlx" ? "lora_parameters: keys" : "target_modules", ": ", t,
               " is a glm4_moe module, but the tensors are those of a dense GLM-4 model");
  // The modules must be exactly the targets on every adapted layer.
  std::set<std::string> names;
  for (const auto& [module, m] : a.modules) {
    int64_t layer;
    std::string name;
    parse_lora_module_path(module, &layer, &name);
    names.insert(name);
  }
  if (!targets_from_config)
    a.info.lora.targets = canonical_targets({names.begin(), names.end()}, fname, "keys");
  std::vector<std::string> missing;
  for (int64_t layer : a.layers_present())
    for (const std::string& t : a.info.lora.targets)
      if (!a.modules.count(lora_module_path(layer, t)))
        missing.push_back(key(lora_module_path(layer, t), AdapterPart::A));
  for (const std::string& n : names)
    if (std::find(a.info.lora.targets.begin(), a.info.lora.targets.end(), n) ==
        a.info.lora.targets.end())
      fail(fname, ": holds LoRA tensors for ", a.chatglm ? chatglm_target_name(n) : n,
           ", which adapter_config.json does not list as a target");
  if (!missing.empty()) {
    std::string list;
    for (size_t i = 0; i < missing.size() && i < 20; ++i) list += "\n  " + missing[i];
    fail(fname, ": ", missing.size(), " target module(s) missing on adapted layers:", list);
  }
}

}  // namespace adapter_detail
}  // namespace glm4
