// mlx-lm LoRA adapters: adapters.safetensors (model.layers.N.<module>.lora_a [in, r], lora_b
// [r, out], DoRA's m [out]) and adapter_config.json ({fine_tune_type: lora | dora, num_layers,
// lora_parameters: {rank, scale, dropout, keys}}). ChatGLM's fused query_key_value adapter is
// written as q/k/v modules with the same lora_a (mlx-lm has no fused module). mlx-lm adapts the
// last num_layers decoder layers (<= 0: all of them), and its scale multiplies B A x directly.
// glm4_moe's routed experts are mlx-lm's stacked switch_mlp (LoRASwitchLinear): lora_a
// [experts, r, in] and lora_b [experts, out, r], PEFT's orientation per expert, no DoRA.
#include <algorithm>
#include <deque>

#include "base/check.h"
#include "io/file/atomic_file.h"
#include "io/safetensors.h"
#include "model/adapter/adapter_detail.h"

namespace glm4::adapter_detail {
namespace fs = std::filesystem;

const char* const kNoMlxKvB =
    "mlx-lm's glm4_moe_lite keeps kv_b_proj as embed_q and unembed_out (MultiLinear), which its "
    "LoRA cannot adapt: leave kv_b_proj out of the targets or keep the PEFT layout";

namespace {
const char* const kSwitchInfix = ".mlp.switch_mlp.";

bool parse_mlx_key(const std::string& key, std::string* module, AdapterPart* part) {
  static const std::vector<std::pair<std::string, AdapterPart>> suffixes{
      {".lora_a", AdapterPart::A}, {".lora_b", AdapterPart::B}, {".m", AdapterPart::Magnitude}};
  for (const auto& [suffix, p] : suffixes) {
    if (key.size() <= suffix.size() ||
        key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    *part = p;
    *module = key.substr(0, key.size() - suffix.size());
    if (is_switch_module(*module)) {
      const size_t at = module->find(kSwitchInfix);
      const std::string expert0 =
          module->substr(0, at) + ".mlp.experts.0." + module->substr(at + 16);
      int64_t layer;
      std::string name;
      return parse_lora_module_path(expert0, &layer, &name) &&
             qualified_lora_target(expert0).rfind("experts.", 0) == 0;
    }
    int64_t layer;
    std::string name;
    // mlx-lm names routed experts only stacked (switch_mlp), never one by one.
    return parse_lora_module_path(*module, &layer, &name) && name != kFusedQkv &&
           qualified_lora_target(*module).rfind("experts.", 0) != 0;
  }
  return false;
}

// mlx-lm's layer-relative key (lora_parameters.keys) for each linear kind a target adapts.
std::vector<std::string> mlx_keys_of(const std::string& target, bool moe) {
  const bool mlp = target == "gate_proj" || target == "up_proj" || target == "down_proj";
  if (moe && mlp)
    return {"mlp." + target, "mlp.shared_experts." + target, "mlp.switch_mlp." + target};
  if (target.rfind("experts.", 0) == 0) return {"mlp.switch_mlp." + target.substr(8)};
  if (target.rfind("shared_experts.", 0) == 0 || target.rfind("mlp.", 0) == 0)
    return {(target.rfind("mlp.", 0) == 0 ? "" : "mlp.") + target};
  const std::string path = lora_module_path(0, target);
  return {path.substr(std::string("model.layers.0.").size())};  // "self_attn.q_proj"
}

// The inverse: mlx-lm's keys as our target names (switch_mlp -> experts); the three kinds of one
// MLP projection together are its bare name, as written for it.
std::vector<std::string> targets_of_mlx_keys(std::vector<std::string> keys) {
  for (std::string& k : keys) {
    if (k.rfind("mlp.switch_mlp.", 0) == 0)
      k = "experts." + k.substr(15);
    else if (k.rfind("mlp.shared_experts.", 0) == 0)
      k = k.substr(4);
  }
  auto has = [&](const std::string& k) {
    return std::find(keys.begin(), keys.end(), k) != keys.end();
  };
  for (const char* p : {"gate_proj", "up_proj", "down_proj"}) {
    const std::string n = p;
    if (!has("mlp." + n) || !has("shared_experts." + n) || !has("experts." + n)) continue;
    std::erase_if(keys, [&](const std::string& k) {
      return k == "mlp." + n || k == "shared_experts." + n || k == "experts." + n;
    });
    keys.push_back(n);
  }
  return keys;
}

bool all_zero(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; });
}
}  // namespace

bool is_switch_module(const std::string& module) {
  return module.find(kSwitchInfix) != std::string::npos;
}

bool split_expert_path(const std::string& path, std::string* switch_module, int64_t* expert) {
  if (qualified_lora_target(path).rfind("experts.", 0) != 0) return false;
  const size_t leaf = path.rfind('.');
  const size_t e = path.rfind('.', leaf - 1);
  const size_t experts = path.rfind(".experts", e);  // "...mlp.experts.E.X"
  *expert = std::stoll(path.substr(e + 1, leaf - e - 1));
  *switch_module = path.substr(0, experts) + ".switch_mlp" + path.substr(leaf);
  return true;
}

void read_switch_tensor(AdapterFile& a, const TensorInfo& t, const std::string& module,
                        AdapterPart part, bool with_tensors, const std::string& fname,
                        std::map<std::string, int>& seen) {
  GLM4_CHECK(part != AdapterPart::Magnitude, fname, ": ", t.name,
             ": mlx-lm has no DoRA for the stacked switch_mlp experts (LoRASwitchLinear)");
  const bool is_a = part == AdapterPart::A;
  GLM4_CHECK(t.shape.size() == 3, fname, ": ", t.name, " has shape ", shape_str(t.shape),
             ", expected ", is_a ? "[experts, r, in]" : "[experts, out, r]",
             " (mlx-lm's LoRASwitchLinear stacks the routed experts)");
  const int64_t r = a.info.lora.rank, experts = t.shape[0];
  const int64_t rank_dim = is_a ? t.shape[1] : t.shape[2];
  GLM4_CHECK(rank_dim == r, fname, ": ", t.name, " has shape ", shape_str(t.shape), ": its rank ",
             rank_dim, " is not the config's rank ", r);
  GLM4_CHECK(a.num_experts < 0 || a.num_experts == experts, fname, ": ", t.name, " stacks ",
             experts, " experts but other switch_mlp tensors stack ", a.num_experts);
  a.num_experts = experts;
  std::vector<float> raw;
  if (with_tensors) raw = read_f32(t);
  const size_t per = size_t(t.shape[1] * t.shape[2]);
  const size_t at = module.find(kSwitchInfix);
  for (int64_t e = 0; e < experts; ++e) {
    const std::string path = module.substr(0, at) + ".mlp.experts." + std::to_string(e) + "." +
                             module.substr(at + std::string(kSwitchInfix).size());
    AdapterModule& m = a.modules[path];
    seen[path] |= is_a ? 1 : 2;
    (is_a ? m.a_shape : m.b_shape) = {t.shape[1], t.shape[2]};
    if (with_tensors)
      (is_a ? m.a : m.b)
          .assign(raw.begin() + ptrdiff_t(e * per), raw.begin() + ptrdiff_t((e + 1) * per));
  }
}

namespace {
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
    l.targets = canonical_targets(targets_of_mlx_keys(names), lf, "keys");
    targets_from_config = true;
  }
  read_tensors(a, weights, parse_mlx_key, true, targets_from_config, with_tensors);
  // A stacked expert with zero A and B is one the PEFT form has no module for.
  if (with_tensors)
    std::erase_if(a.modules, [](const auto& kv) {
      std::string sw;
      int64_t e;
      return split_expert_path(kv.first, &sw, &e) && all_zero(kv.second.a) && all_zero(kv.second.b);
    });
  GLM4_CHECK(!a.modules.empty(), weights.string(), ": every LoRA tensor is zero");

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
  std::deque<std::vector<float>> storage;  // stable addresses for the tensors to write
  std::vector<TensorToWrite> tensors;
  auto add = [&](const std::string& key, const Shape& shape, const std::vector<float>& v) {
    int64_t rows = shape[0], cols = shape[1];
    std::vector<float>& t = storage.emplace_back(v.size());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t k = 0; k < cols; ++k) t[size_t(k * rows + i)] = v[size_t(i * cols + k)];
    tensors.push_back(f32_tensor(key, {cols, rows}, t.data()));
  };
  std::map<std::string, std::map<int64_t, const AdapterModule*>>
      stacks;  // switch module -> experts
  bool moe = false;
  for (const auto& [module, m] : a.modules) {
    moe |= is_moe_module_path(module);
    GLM4_CHECK(!module.ends_with(".kv_b_proj"), "adapter ", dir, ": ", module, ": ", kNoMlxKvB);
    std::string sw;
    int64_t e;
    if (split_expert_path(module, &sw, &e)) {
      GLM4_CHECK(!l.dora, "adapter ", dir, ": ", module, ": mlx-lm has no DoRA for the stacked ",
                 "switch_mlp experts (LoRASwitchLinear); keep the PEFT layout");
      stacks[sw][e] = &m;
      continue;
    }
    add(adapter_tensor_key("mlx", module, AdapterPart::A), m.a_shape, m.a);  // [in, r]
    add(adapter_tensor_key("mlx", module, AdapterPart::B), m.b_shape, m.b);  // [r, out]
    if (l.dora)
      tensors.push_back(f32_tensor(adapter_tensor_key("mlx", module, AdapterPart::Magnitude),
                                   m.magnitude_shape, m.magnitude.data()));
  }
  // Every expert of a layer in one tensor; the experts the adapter has no module for are zero.
  int64_t experts = a.num_experts;
  if (experts < 0)
    for (const auto& [sw, by_expert] : stacks)
      experts = std::max(experts, by_expert.rbegin()->first + 1);
  for (const auto& [sw, by_expert] : stacks) {
    const AdapterModule& first = *by_expert.begin()->second;
    for (const auto& [e, m] : by_expert) {
      GLM4_CHECK(e < experts, "adapter ", dir, ": ", sw, ": expert ", e, " but the model has ",
                 experts, " routed experts");
      GLM4_CHECK(m->a_shape == first.a_shape && m->b_shape == first.b_shape, "adapter ", dir, ": ",
                 sw, ": expert ", e, " has A ", shape_str(m->a_shape), " and B ",
                 shape_str(m->b_shape), " but expert ", by_expert.begin()->first, " has ",
                 shape_str(first.a_shape), " and ", shape_str(first.b_shape),
                 "; the stacked MLX layout needs one rank and shape for every expert");
    }
    for (AdapterPart part : {AdapterPart::A, AdapterPart::B}) {
      const bool is_a = part == AdapterPart::A;
      const Shape& s = is_a ? first.a_shape : first.b_shape;
      const size_t per = size_t(s[0] * s[1]);
      std::vector<float>& t = storage.emplace_back(size_t(experts) * per, 0.0f);
      for (const auto& [e, m] : by_expert)
        std::copy_n((is_a ? m->a : m->b).begin(), per, t.begin() + ptrdiff_t(size_t(e) * per));
      tensors.push_back(
          f32_tensor(sw + (is_a ? ".lora_a" : ".lora_b"), {experts, s[0], s[1]}, t.data()));
    }
  }
  write_safetensors(dir / "adapters.safetensors", tensors, {{"format", "mlx"}});

  json keys = json::array();
  for (const std::string& t : l.targets)
    for (const std::string& k : mlx_keys_of(t, moe)) keys.push_back(k);
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
