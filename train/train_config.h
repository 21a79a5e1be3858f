// Every setting of a training run. The JSON config's keys are the long flag names with
// underscores ("learning_rate"); flags given on the command line win over the file. Each field is
// listed once, with its key and help, in train_settings.h.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/file_memory.h"

namespace glm4 {

struct TrainConfig {
  std::string model;     // model directory (Hugging Face layout)
  std::string data;      // directory with train.jsonl [valid.jsonl] or a .jsonl file
  std::string out;       // output directory: adapter, checkpoints, metrics
  int64_t iters = 1000;  // optimizer steps
  int64_t batch_size = 4;
  int64_t max_seq_length = 2048;
  double learning_rate = 2e-4;           // defaults: docs/training.md, "Defaults"
  std::string lr_schedule = "constant";  // constant | cosine
  int64_t warmup = 0;
  double min_lr = 0;
  double weight_decay = 0.0;
  double grad_clip = 1.0;  // global gradient norm; 0 = off
  int64_t grad_accum = 1;  // micro-batches per step
  bool grad_checkpoint = false;
  int64_t lora_rank = 16;
  double lora_alpha = 32;
  double lora_dropout = 0.0;
  std::vector<std::string> lora_targets{"all-linear"};
  int64_t num_layers = -1;  // LoRA on the last N layers; -1 = all
  bool rslora = false;
  bool full = false;                    // train every parameter instead of LoRA
  std::string fine_tune_type = "lora";  // lora | dora | full (mlx-lm's spelling; full = --full)
  bool mask_prompt = false;
  bool pack = false;
  uint64_t seed = 0;
  int64_t steps_per_report = 10;
  int64_t steps_per_eval = 200;
  int64_t val_batches = 25;  // -1 = the whole validation set
  int64_t save_every = 100;
  int64_t patience = 0;                 // stop after N evaluations without improvement; 0 = off
  std::string init_adapter;             // continue from an adapter (its rank/alpha/targets win)
  std::string resume;                   // a checkpoint .h5 to continue from
  std::string adapter_format = "peft";  // peft | mlx
  int64_t threads = 0;                  // 0 = all cores (under mpirun: the rank's share of them)
  double bucket_mb = 25;  // mpirun: gradients are summed over the ranks in buckets of this size
  int64_t sync_check_every =
      100;  // mpirun: compare the ranks' parameter checksums every N steps; 0 = off
  std::string compute = "auto";  // frozen products in auto | f32 | bf16
  bool mmap = false;             // map the weight files instead of reading them into 2 MB pages
  bool no_mmap = false;  // read them into 2 MB pages even when they exceed the memory available

  // The weight files' residency these two flags ask for (kAuto when neither is given).
  FileResidency weights_memory() const;

  // Throws glm4::Error naming the key (as a flag, --learning-rate) when a value is invalid.
  void validate() const;
};

// Fills `c` from a JSON object; unknown keys and wrong types are errors naming the key and file.
void apply_json(TrainConfig& c, const nlohmann::json& j, const std::string& source);
nlohmann::json to_json(const TrainConfig& c);

}  // namespace glm4
