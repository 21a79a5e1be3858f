#include "train/train_config.h"

#include <cmath>
#include <functional>
#include <map>

#include "base/check.h"
#include "base/strings.h"

namespace glm4 {

namespace {
std::string flag(const std::string& key) {
  std::string f = "--" + key;
  for (char& ch : f)
    if (ch == '_') ch = '-';
  return f;
}

// One table of fields: reading, writing and the key names stay in one place.
struct Field {
  std::function<void(TrainConfig&, const nlohmann::json&)> read;
  std::function<nlohmann::json(const TrainConfig&)> write;
};

template <typename T>
Field field(T TrainConfig::*member) {
  return {[member](TrainConfig& c, const nlohmann::json& j) { c.*member = j.get<T>(); },
          [member](const TrainConfig& c) { return nlohmann::json(c.*member); }};
}

const std::map<std::string, Field>& fields() {
  static const std::map<std::string, Field> table{
      {"model", field(&TrainConfig::model)},
      {"data", field(&TrainConfig::data)},
      {"out", field(&TrainConfig::out)},
      {"iters", field(&TrainConfig::iters)},
      {"batch_size", field(&TrainConfig::batch_size)},
      {"max_seq_length", field(&TrainConfig::max_seq_length)},
      {"learning_rate", field(&TrainConfig::learning_rate)},
      {"lr_schedule", field(&TrainConfig::lr_schedule)},
      {"warmup", field(&TrainConfig::warmup)},
      {"min_lr", field(&TrainConfig::min_lr)},
      {"weight_decay", field(&TrainConfig::weight_decay)},
      {"grad_clip", field(&TrainConfig::grad_clip)},
      {"grad_accum", field(&TrainConfig::grad_accum)},
      {"grad_checkpoint", field(&TrainConfig::grad_checkpoint)},
      {"lora_rank", field(&TrainConfig::lora_rank)},
      {"lora_alpha", field(&TrainConfig::lora_alpha)},
      {"lora_dropout", field(&TrainConfig::lora_dropout)},
      {"lora_targets", field(&TrainConfig::lora_targets)},
      {"num_layers", field(&TrainConfig::num_layers)},
      {"rslora", field(&TrainConfig::rslora)},
      {"full", field(&TrainConfig::full)},
      {"fine_tune_type", field(&TrainConfig::fine_tune_type)},
      {"mask_prompt", field(&TrainConfig::mask_prompt)},
      {"pack", field(&TrainConfig::pack)},
      {"seed", field(&TrainConfig::seed)},
      {"steps_per_report", field(&TrainConfig::steps_per_report)},
      {"steps_per_eval", field(&TrainConfig::steps_per_eval)},
      {"val_batches", field(&TrainConfig::val_batches)},
      {"save_every", field(&TrainConfig::save_every)},
      {"patience", field(&TrainConfig::patience)},
      {"init_adapter", field(&TrainConfig::init_adapter)},
      {"resume", field(&TrainConfig::resume)},
      {"adapter_format", field(&TrainConfig::adapter_format)},
      {"threads", field(&TrainConfig::threads)},
      {"bucket_mb", field(&TrainConfig::bucket_mb)},
      {"sync_check_every", field(&TrainConfig::sync_check_every)},
      {"compute", field(&TrainConfig::compute)},
  };
  return table;
}
}  // namespace

void apply_json(TrainConfig& c, const nlohmann::json& j, const std::string& source) {
  GLM4_CHECK(j.is_object(), source, ": a training config must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (key.rfind("_comment", 0) == 0) continue;
    auto it = fields().find(key);
    GLM4_CHECK(it != fields().end(), source, ": unknown key \"", key, "\"");
    if (key == "lora_targets" && value.is_string()) {  // "q_proj,v_proj" or "all-linear"
      c.lora_targets = split_commas(value.get<std::string>());
      continue;
    }
    try {
      it->second.read(c, value);
    } catch (const nlohmann::json::exception&) {
      fail(source, ": key \"", key, "\" has the wrong type (", value.dump(), ")");
    }
  }
}

nlohmann::json to_json(const TrainConfig& c) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [key, f] : fields()) j[key] = f.write(c);
  return j;
}

void TrainConfig::validate() const {
  auto check_positive = [](int64_t v, const char* key) {
    GLM4_CHECK(v > 0, flag(key), " must be positive, got ", v);
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
  GLM4_CHECK(std::isfinite(learning_rate) && learning_rate > 0, "--learning-rate must be a positive number, got ",
             learning_rate);
  GLM4_CHECK(std::isfinite(min_lr) && min_lr >= 0 && min_lr <= learning_rate,
             "--min-lr must be in [0, learning rate], got ", min_lr);
  GLM4_CHECK(lr_schedule == "constant" || lr_schedule == "cosine",
             "--lr-schedule must be constant or cosine, got \"", lr_schedule, "\"");
  GLM4_CHECK(warmup >= 0 && warmup <= iters, "--warmup must be in [0, iters], got ", warmup);
  GLM4_CHECK(std::isfinite(weight_decay) && weight_decay >= 0, "--weight-decay must be >= 0, got ", weight_decay);
  GLM4_CHECK(std::isfinite(grad_clip) && grad_clip >= 0, "--grad-clip must be >= 0, got ", grad_clip);
  GLM4_CHECK(val_batches == -1 || val_batches > 0, "--val-batches must be positive or -1, got ", val_batches);
  GLM4_CHECK(patience >= 0, "--patience must be >= 0, got ", patience);
  GLM4_CHECK(threads >= 0, "--threads must be >= 0, got ", threads);
  GLM4_CHECK(std::isfinite(bucket_mb) && bucket_mb > 0, "--bucket-mb must be positive, got ", bucket_mb);
  GLM4_CHECK(sync_check_every >= 0, "--sync-check-every must be >= 0, got ", sync_check_every);
  GLM4_CHECK(compute == "auto" || compute == "f32" || compute == "bf16",
             "--compute must be auto, f32 or bf16, got \"", compute, "\"");
  GLM4_CHECK(adapter_format == "peft" || adapter_format == "mlx",
             "--adapter-format must be peft or mlx, got \"", adapter_format, "\"");
  GLM4_CHECK(fine_tune_type == "lora" || fine_tune_type == "dora" || fine_tune_type == "full",
             "--fine-tune-type must be lora, dora or full, got \"", fine_tune_type, "\"");
  GLM4_CHECK(!(full && fine_tune_type == "dora"), "--full and --fine-tune-type dora exclude each other");
  if (!full) {
    GLM4_CHECK(init_adapter.size() || lora_rank > 0, "--lora-rank must be positive, got ", lora_rank);
    GLM4_CHECK(std::isfinite(lora_alpha) && lora_alpha > 0, "--lora-alpha must be positive, got ", lora_alpha);
    GLM4_CHECK(lora_dropout >= 0 && lora_dropout < 1, "--lora-dropout must be in [0, 1), got ", lora_dropout);
    GLM4_CHECK(num_layers == -1 || num_layers > 0, "--num-layers must be positive or -1, got ", num_layers);
  }
}

}  // namespace glm4
