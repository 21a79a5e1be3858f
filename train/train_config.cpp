// A TrainConfig as JSON (the --config file and the checkpoint's copy), read and written through
// the settings list of train_settings.h, and the checks of its values.
#include "train/train_config.h"

#include <cmath>
#include <functional>
#include <map>
#include <type_traits>

#include "base/check.h"
#include "base/strings.h"
#include "io/file/json_line.h"
#include "train/config_keys.h"
#include "train/train_settings.h"

namespace glm4 {

namespace {
// Reading and writing one setting's JSON value.
// `read` returns false when the value has the wrong type; `expected` says which it needs.
struct Field {
  std::function<bool(TrainConfig&, const nlohmann::json&)> read;
  std::function<nlohmann::json(const TrainConfig&)> write;
  const char* expected;
};

template <typename T>
const char* expected_type() {
  if constexpr (std::is_same_v<T, bool>) return "true or false";
  if constexpr (std::is_integral_v<T>) return "an integer";
  if constexpr (std::is_floating_point_v<T>) return "a number";
  if constexpr (std::is_same_v<T, std::string>) return "a string";
  return "a list of strings (or one string \"a,b\")";
}

template <typename T>
Field field(T TrainConfig::*member) {
  return {[member](TrainConfig& c, const nlohmann::json& j) {
            if constexpr (std::is_same_v<T, std::vector<std::string>>) {
              if (j.is_string()) {  // "q_proj,v_proj" or "all-linear"
                c.*member = split_commas(j.get<std::string>());
                return true;
              }
            }
            // nlohmann would cut 1.5 to 1 for an integer setting.
            if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
              if (!j.is_number_integer()) return false;
            try {
              c.*member = j.get<T>();
            } catch (const nlohmann::json::exception&) {
              return false;
            }
            return true;
          },
          [member](const TrainConfig& c) { return nlohmann::json(c.*member); }, expected_type<T>()};
}

// Every setting by key (train_settings.h).
const std::map<std::string, Field>& fields() {
  static const std::map<std::string, Field> table = [] {
    std::map<std::string, Field> t;
    visit_train_settings(
        [&](const char* key, auto member, const char*) { t.emplace(key, field(member)); });
    return t;
  }();
  return table;
}
}  // namespace

std::string train_flag_name(const std::string& key) {
  std::string f = "--" + key;
  for (char& ch : f)
    if (ch == '_') ch = '-';
  return f;
}

void apply_json(TrainConfig& c, const nlohmann::json& j, const std::string& source) {
  GLM4_CHECK(j.is_object(), source, ": a training config must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (key.rfind("_comment", 0) == 0) continue;
    auto it = fields().find(key);
    if (it == fields().end()) {
      const std::string hint = foreign_key_hint(key);
      fail(source, ": unknown key \"", key, "\"", hint.empty() ? "" : ": " + hint);
    }
    if (!it->second.read(c, value))
      fail(source, ": key \"", key, "\" has the wrong type (", json_line(value), "; expected ",
           it->second.expected, ")");
  }
}

nlohmann::json to_json(const TrainConfig& c) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [key, f] : fields()) j[key] = f.write(c);
  return j;
}

FileResidency TrainConfig::weights_memory() const {
  if (mmap) return FileResidency::kMapped;
  if (no_mmap) return FileResidency::kHugePages;
  return FileResidency::kAuto;
}

void TrainConfig::validate() const {
  auto check_positive = [](int64_t v, const char* key) {
    GLM4_CHECK(v > 0, train_flag_name(key), " must be positive, got ", v);
  };
  GLM4_CHECK(!model.empty(), "--model is required");
  GLM4_CHECK(!data.empty(), "--data is required");
  GLM4_CHECK(!out.empty(), "--out is required");
  check_positive(iters, "iters");
  check_positive(batch_size, "batch_size");
  check_positive(max_seq_length, "max_seq_length");
  check_positive(grad_accum, "grad_accum");
  check_positive(steps_per_report, "steps_per_report");
  check_positive(steps_per_eval, "steps_per_eval");
  check_positive(save_every, "save_every");
  GLM4_CHECK(std::isfinite(learning_rate) && learning_rate > 0,
             "--learning-rate must be a positive number, got ", learning_rate);
  GLM4_CHECK(std::isfinite(min_lr) && min_lr >= 0 && min_lr <= learning_rate,
             "--min-lr must be in [0, learning rate], got ", min_lr);
  GLM4_CHECK(lr_schedule == "constant" || lr_schedule == "cosine",
             "--lr-schedule must be constant or cosine, got \"", lr_schedule, "\"");
  GLM4_CHECK(warmup >= 0 && warmup <= iters, "--warmup must be in [0, iters], got ", warmup);
  GLM4_CHECK(std::isfinite(weight_decay) && weight_decay >= 0, "--weight-decay must be >= 0, got ",
             weight_decay);
  GLM4_CHECK(std::isfinite(grad_clip) && grad_clip >= 0, "--grad-clip must be >= 0, got ",
             grad_clip);
  GLM4_CHECK(val_batches == -1 || val_batches > 0, "--val-batches must be positive or -1, got ",
             val_batches);
  GLM4_CHECK(patience >= 0, "--patience must be >= 0, got ", patience);
  GLM4_CHECK(!(mmap && no_mmap), "--mmap and --no-mmap exclude each other");
  GLM4_CHECK(threads >= 0, "--threads must be >= 0, got ", threads);
  GLM4_CHECK(std::isfinite(bucket_mb) && bucket_mb > 0, "--bucket-mb must be positive, got ",
             bucket_mb);
  GLM4_CHECK(sync_check_every >= 0, "--sync-check-every must be >= 0, got ", sync_check_every);
  GLM4_CHECK(compute == "auto" || compute == "f32" || compute == "bf16",
             "--compute must be auto, f32 or bf16, got \"", compute, "\"");
  GLM4_CHECK(adapter_format == "peft" || adapter_format == "mlx",
             "--adapter-format must be peft or mlx, got \"", adapter_format, "\"");
  GLM4_CHECK(fine_tune_type == "lora" || fine_tune_type == "dora" || fine_tune_type == "full",
             "--fine-tune-type must be lora, dora or full, got \"", fine_tune_type, "\"");
  GLM4_CHECK(!(full && fine_tune_type == "dora"),
             "--full and --fine-tune-type dora exclude each other");
  if (!full) {
    GLM4_CHECK(init_adapter.size() || lora_rank > 0, "--lora-rank must be positive, got ",
               lora_rank);
    GLM4_CHECK(std::isfinite(lora_alpha) && lora_alpha > 0, "--lora-alpha must be positive, got ",
               lora_alpha);
    GLM4_CHECK(lora_dropout >= 0 && lora_dropout < 1, "--lora-dropout must be in [0, 1), got ",
               lora_dropout);
    GLM4_CHECK(num_layers == -1 || num_layers > 0, "--num-layers must be positive or -1, got ",
               num_layers);
  }
}

}  // namespace glm4
