// mlx-lm's and PEFT/TRL's config keys in glm4's terms, and the YAML refusal.
#include "train/config_keys.h"

#include <cctype>
#include <fstream>
#include <map>
#include <utility>

#include "base/check.h"
#include "base/strings.h"
#include "io/file/json_file.h"
#include "train/train_config.h"
#include "train/train_settings.h"

namespace glm4 {

namespace {
// Keys of other tools' configs whose value means exactly what glm4's key does.
const std::map<std::string, std::string>& renames() {
  static const std::map<std::string, std::string> table = {
      {"adapter_path", "out"},
      {"lora_layers", "num_layers"},
      {"grad_accumulation_steps", "grad_accum"},
      {"gradient_accumulation_steps", "grad_accum"},
      {"max_steps", "iters"},
      {"warmup_steps", "warmup"},
      {"per_device_train_batch_size", "batch_size"},
      {"gradient_checkpointing", "grad_checkpoint"},
      {"r", "lora_rank"},
      {"target_modules", "lora_targets"},
  };
  return table;
}

std::string spelled(const std::string& key) {
  return str_cat("'", key, "' (", train_flag_name(key), ")");
}

bool looks_like_yaml(const std::filesystem::path& path) {
  const std::string ext = path.extension().string();
  if (ext == ".yaml" || ext == ".yml") return true;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    if (t == "---") return true;
    const size_t colon = t.find(':');
    if (colon == std::string::npos || colon == 0) return false;
    for (size_t i = 0; i < colon; ++i)
      if (!(std::isalnum(static_cast<unsigned char>(t[i])) || t[i] == '_' || t[i] == '-'))
        return false;
    return true;  // "key: value", unquoted: YAML
  }
  return false;
}

void put(nlohmann::json& out, const std::string& key, nlohmann::json value,
         const std::string& source, const std::string& from) {
  GLM4_CHECK(!out.contains(key), source, ": \"", from, "\" and \"", key,
             "\" set the same thing; keep one");
  out[key] = std::move(value);
}

// mlx-lm's {"rank": 8, "scale": 20.0, "dropout": 0.0, "keys": ["self_attn.q_proj", ...]}.
void put_lora_parameters(nlohmann::json& out, const nlohmann::json& p, const std::string& source) {
  const std::string where = source + ": \"lora_parameters\"";
  GLM4_CHECK(p.is_object(), where, ": expected an object {rank, scale, dropout, keys}");
  int64_t rank = TrainConfig{}.lora_rank;
  for (const auto& [key, value] : p.items()) {
    GLM4_CHECK(
        key == "rank" || key == "scale" || key == "alpha" || key == "dropout" || key == "keys",
        where, ": unknown key \"", key, "\" (rank, scale, dropout, keys)");
    GLM4_CHECK(key == "keys" ? value.is_array() : value.is_number(), where, ".", key,
               ": wrong type (", value.dump(), ")");
  }
  if (p.contains("rank")) {
    rank = p["rank"].get<int64_t>();
    put(out, "lora_rank", rank, source, "lora_parameters.rank");
  } else if (out.contains("lora_rank") && out["lora_rank"].is_number_integer()) {
    rank = out["lora_rank"].get<int64_t>();
  }
  // mlx-lm multiplies the LoRA product by `scale`; glm4 (as PEFT) by alpha / rank.
  if (p.contains("scale"))
    put(out, "lora_alpha", p["scale"].get<double>() * double(rank), source,
        "lora_parameters.scale");
  if (p.contains("alpha")) put(out, "lora_alpha", p["alpha"], source, "lora_parameters.alpha");
  if (p.contains("dropout"))
    put(out, "lora_dropout", p["dropout"], source, "lora_parameters.dropout");
  if (p.contains("keys")) {
    std::vector<std::string> targets;
    for (const nlohmann::json& k : p["keys"]) {
      GLM4_CHECK(k.is_string(), where, ".keys: expected module names, got ", k.dump());
      const std::string name = k.get<std::string>();
      targets.push_back(name.substr(name.rfind('.') + 1));  // "self_attn.q_proj" -> "q_proj"
    }
    put(out, "lora_targets", targets, source, "lora_parameters.keys");
  }
}
}  // namespace

nlohmann::json read_config_file(const std::filesystem::path& path) {
  std::error_code ec;
  GLM4_CHECK(!std::filesystem::is_directory(path, ec), path.string(),
             ": is a directory, expected a JSON file");
  if (std::filesystem::exists(path, ec) && looks_like_yaml(path))
    fail(path.string(),
         ": expected JSON, got YAML: glm4 reads JSON configs; write the same keys as "
         "{\"key\": value, ...} (mlx-lm's keys are understood)");
  return translate_foreign_keys(read_json_file(path), path.string());
}

nlohmann::json translate_foreign_keys(const nlohmann::json& config, const std::string& source) {
  if (!config.is_object()) return config;
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, value] : config.items())  // glm4's own keys first: clashes are named
    if (key != "lora_parameters" && !renames().count(key)) out[key] = value;
  for (const auto& [key, value] : config.items()) {
    if (key == "lora_parameters") put_lora_parameters(out, value, source);
    auto it = renames().find(key);
    if (it != renames().end()) put(out, it->second, value, source, key);
  }
  if (auto it = out.find("lr_schedule"); it != out.end() && it->is_object())
    fail(source, ": \"lr_schedule\" is mlx-lm's schedule object; glm4 takes ",
         spelled("lr_schedule"), " \"constant\" or \"cosine\", with ", spelled("warmup"), " and ",
         spelled("min_lr"));
  return out;
}

std::string foreign_key_hint(const std::string& key) {
  static const std::map<std::string, std::string> hints = {
      {"train", "glm4 train always trains"},
      {"test", "glm4 evaluate --data DIR and glm4 perplexity --data DIR score DIR/test.jsonl"},
      {"test_batches", "glm4 perplexity --data DIR scores all of DIR/test.jsonl"},
      {"optimizer", "glm4 trains with AdamW; its setting is " + spelled("weight_decay")},
      {"optimizer_config", "glm4 trains with AdamW; its setting is " + spelled("weight_decay")},
      {"resume_adapter_file", "glm4 starts from an adapter directory with " +
                                  spelled("init_adapter") + ", or continues a run with " +
                                  spelled("resume")},
      {"epochs", "glm4 counts optimizer steps: " + spelled("iters")},
      {"num_train_epochs", "glm4 counts optimizer steps: " + spelled("iters")},
      {"lr", "glm4 spells it " + spelled("learning_rate")},
      {"lr_scheduler_type", "glm4 spells it " + spelled("lr_schedule") + ": constant or cosine"},
      {"use_dora", "glm4 spells it " + spelled("fine_tune_type") + ": \"dora\""},
      {"lora_scale", "glm4 takes " + spelled("lora_alpha") + " = scale x lora_rank"},
      {"scale", "glm4 takes " + spelled("lora_alpha") + " = scale x lora_rank"},
      {"wandb", "glm4 writes OUT/metrics.jsonl; glm4 plot draws it"},
      {"report_to", "glm4 writes OUT/metrics.jsonl; glm4 plot draws it"},
      {"hf_dataset", "glm4 reads local JSONL: " + spelled("data")},
      {"model_name_or_path", "glm4 spells it " + spelled("model")},
      {"output_dir", "glm4 spells it " + spelled("out")},
  };
  auto it = hints.find(key);
  return it == hints.end() ? "" : it->second;
}

}  // namespace glm4
