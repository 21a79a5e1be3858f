// glm4 train: LoRA (or full) fine-tuning. Flags mirror mlx-lm's `lora` command; every flag is
// also a key of the --config JSON file (underscores for dashes), and flags win over the file.
#include <fstream>

#include "cli/cli_common.h"
#include "train/trainer.h"

namespace glm4::cli {

void add_train_command(CLI::App& parent, std::vector<Command>& out) {
  CLI::App* app = parent.add_subcommand("train", "Fine-tune a model with LoRA (or fully with --full)");
  auto flags = std::make_shared<TrainConfig>();
  auto config_file = std::make_shared<std::string>();
  auto targets = std::make_shared<std::string>();
  // key (as in the JSON config) -> option, to know which flags were given.
  auto given = std::make_shared<std::vector<std::pair<std::string, CLI::Option*>>>();
  auto add = [&](const std::string& key, auto* value, const std::string& help) {
    std::string name = "--" + key;
    for (char& ch : name)
      if (ch == '_') ch = '-';
    given->push_back({key, app->add_option(name, *value, help)});
  };
  auto add_flag = [&](const std::string& key, bool* value, const std::string& help) {
    std::string name = "--" + key;
    for (char& ch : name)
      if (ch == '_') ch = '-';
    given->push_back({key, app->add_flag(name, *value, help)});
  };
  TrainConfig& f = *flags;
  app->add_option("--config", *config_file, "JSON file of settings (keys = flag names with underscores)");
  add("model", &f.model, "Model directory (Hugging Face layout)");
  add("data", &f.data, "Directory with train.jsonl [valid.jsonl], or a .jsonl file");
  add("out", &f.out, "Output directory: adapter, best/, checkpoint.h5, metrics.jsonl");
  add("iters", &f.iters, "Optimizer steps (default 1000)");
  add("batch_size", &f.batch_size, "Examples per micro-batch (default 4)");
  add("max_seq_length", &f.max_seq_length, "Longer examples are truncated (default 2048)");
  add("learning_rate", &f.learning_rate, "Peak learning rate (default 1e-5)");
  add("lr_schedule", &f.lr_schedule, "constant | cosine (default constant)");
  add("warmup", &f.warmup, "Linear warmup steps (default 0)");
  add("min_lr", &f.min_lr, "Final learning rate of the cosine schedule (default 0)");
  add("weight_decay", &f.weight_decay, "AdamW decoupled weight decay (default 0)");
  add("grad_clip", &f.grad_clip, "Clip the global gradient norm to this; 0 = off (default 1)");
  add("grad_accum", &f.grad_accum, "Micro-batches per step (default 1)");
  add_flag("grad_checkpoint", &f.grad_checkpoint, "Recompute each decoder layer in backward (less memory)");
  add("lora_rank", &f.lora_rank, "LoRA rank r (default 8)");
  add("lora_alpha", &f.lora_alpha, "LoRA alpha; scale = alpha / r (default 16)");
  add("lora_dropout", &f.lora_dropout, "Dropout on the LoRA input (default 0)");
  given->push_back({"lora_targets", app->add_option("--lora-targets", *targets,
                                                    "Comma-separated modules or all-linear "
                                                    "(default q_proj,k_proj,v_proj,o_proj; ChatGLM: "
                                                    "query_key_value,dense,dense_h_to_4h,dense_4h_to_h)")});
  add("num_layers", &f.num_layers, "LoRA on the last N layers only (default all)");
  add_flag("rslora", &f.rslora, "rsLoRA scaling alpha / sqrt(r)");
  add_flag("full", &f.full, "Train every parameter instead of LoRA");
  add("fine_tune_type", &f.fine_tune_type, "lora | dora | full (default lora; dora adds PEFT's magnitude "
      "per output row, full = --full)");
  add_flag("mask_prompt", &f.mask_prompt, "Train only on completions / assistant turns");
  add_flag("pack", &f.pack, "Pack short examples into full rows (attention stays per example)");
  add("seed", &f.seed, "Seed for LoRA init, shuffling and dropout (default 0)");
  add("steps_per_report", &f.steps_per_report, "Report every N steps (default 10)");
  add("steps_per_eval", &f.steps_per_eval, "Validate every N steps (default 200)");
  add("val_batches", &f.val_batches, "Validation batches per evaluation; -1 = all (default 25)");
  add("save_every", &f.save_every, "Save adapter and checkpoint every N steps (default 100)");
  add("patience", &f.patience, "Stop after N evaluations without improvement; 0 = off");
  add("init_adapter", &f.init_adapter, "Start from this adapter (PEFT or MLX directory)");
  add("resume", &f.resume, "Continue from a checkpoint.h5 of an earlier run");
  add("adapter_format", &f.adapter_format, "peft | mlx (default peft)");
  add("threads", &f.threads, "Threads to use (default: all cores; under mpirun, the rank's share)");
  add("bucket_mb", &f.bucket_mb, "mpirun: sum gradients over the ranks in buckets of this many MB (default 25)");
  add("sync_check_every", &f.sync_check_every,
      "mpirun: check every N steps that all ranks hold the same parameters; 0 = off (default 100)");
  add("compute", &f.compute, kComputeFlagHelp);

  out.push_back({app, [flags, config_file, targets, given] {
    TrainConfig config;
    if (!config_file->empty()) {
      std::ifstream in(*config_file);
      GLM4_CHECK(in, "--config ", *config_file, ": cannot read the file");
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(in);
      } catch (const nlohmann::json::exception& e) {
        fail("--config ", *config_file, ": invalid JSON: ", e.what());
      }
      apply_json(config, j, *config_file);
    }
    nlohmann::json from_flags = to_json(*flags);
    nlohmann::json passed = nlohmann::json::object();
    for (const auto& [key, opt] : *given)
      if (opt->count() > 0) passed[key] = key == "lora_targets" ? nlohmann::json(*targets) : from_flags[key];
    apply_json(config, passed, "command line");
    TrainSummary s = run_training(config);
    if (s.rank != 0) return;  // under mpirun, rank 0 reports
    std::fprintf(stderr, "trained %lld steps; last loss %.4f", (long long)s.steps, s.last_loss);
    if (s.best_val_loss >= 0) std::fprintf(stderr, "; best val loss %.4f", s.best_val_loss);
    std::fprintf(stderr, "\n%s: %s\n", config.full ? "model" : "adapter", config.out.c_str());
    if (s.best_val_loss >= 0) std::fprintf(stderr, "lowest validation loss: %s/best\n", config.out.c_str());
  }});
}

}  // namespace glm4::cli
