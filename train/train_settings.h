// The one list of training settings: each TrainConfig field with its key and its help text. It
// drives the --config JSON reader and writer (train_config.cpp) and the flags of `glm4 train`
// (cli/cmd_train.cpp), so a new setting is a field of TrainConfig and a line here.
#pragma once
#include <string>

#include "train/train_config.h"

namespace glm4 {

// Calls visit(key, &TrainConfig::field, help) for every setting, in --help order. The key is the
// JSON config's ("learning_rate"), the flag is train_flag_name(key). --compute's help is null:
// the CLI gives it the text every command's --compute shares.
template <typename Visitor>
void visit_train_settings(Visitor&& visit) {
  using C = TrainConfig;
  visit("model", &C::model, "Model directory (Hugging Face layout)");
  visit("data", &C::data, "Directory with train.jsonl [valid.jsonl], or a .jsonl file");
  visit("out", &C::out, "Output directory: adapter, best/, checkpoint.h5, metrics.jsonl");
  visit("iters", &C::iters, "Optimizer steps (default 1000)");
  visit("batch_size", &C::batch_size, "Examples per micro-batch (default 4)");
  visit("max_seq_length", &C::max_seq_length, "Longer examples are truncated (default 2048)");
  visit("learning_rate", &C::learning_rate, "Peak learning rate (default 2e-4)");
  visit("lr_schedule", &C::lr_schedule, "constant | cosine (default constant)");
  visit("warmup", &C::warmup, "Linear warmup steps (default 0)");
  visit("min_lr", &C::min_lr, "Final learning rate of the cosine schedule (default 0)");
  visit("weight_decay", &C::weight_decay, "AdamW decoupled weight decay (default 0)");
  visit("grad_clip", &C::grad_clip, "Clip the global gradient norm to this; 0 = off (default 1)");
  visit("grad_accum", &C::grad_accum, "Micro-batches per step (default 1)");
  visit("grad_checkpoint", &C::grad_checkpoint,
        "Recompute each decoder layer in backward (less memory)");
  visit("lora_rank", &C::lora_rank, "LoRA rank r (default 16)");
  visit("lora_alpha", &C::lora_alpha, "LoRA alpha; scale = alpha / r (default 32)");
  visit("lora_dropout", &C::lora_dropout, "Dropout on the LoRA input (default 0)");
  visit("lora_targets", &C::lora_targets,
        "Comma-separated modules (q_proj,k_proj,v_proj,o_proj,gate_up_proj,down_proj) or "
        "all-linear, every one of them (default all-linear; ChatGLM's are "
        "query_key_value,dense,dense_h_to_4h,dense_4h_to_h; glm4_moe's MLP ones are "
        "gate_proj,up_proj,down_proj, narrowed as experts, shared_experts, mlp.X, experts.X: "
        "docs/training.md)");
  visit("num_layers", &C::num_layers, "LoRA on the last N layers only (default all)");
  visit("rslora", &C::rslora, "rsLoRA scaling alpha / sqrt(r)");
  visit("full", &C::full, "Train every parameter instead of LoRA");
  visit("fine_tune_type", &C::fine_tune_type,
        "lora | dora | full (default lora; dora adds PEFT's magnitude "
        "per output row, full = --full)");
  visit("mask_prompt", &C::mask_prompt, "Train only on completions / assistant turns");
  visit("pack", &C::pack, "Pack short examples into full rows (attention stays per example)");
  visit("seed", &C::seed, "Seed for LoRA init, shuffling and dropout (default 0)");
  visit("steps_per_report", &C::steps_per_report, "Report every N steps (default 10)");
  visit("steps_per_eval", &C::steps_per_eval, "Validate every N steps (default 200)");
  visit("val_batches", &C::val_batches, "Validation batches per evaluation; -1 = all (default 25)");
  visit("save_every", &C::save_every, "Save adapter and checkpoint every N steps (default 100)");
  visit("patience", &C::patience, "Stop after N evaluations without improvement; 0 = off");
  visit("init_adapter", &C::init_adapter, "Start from this adapter (PEFT or MLX directory)");
  visit("resume", &C::resume, "Continue from a checkpoint.h5 of an earlier run");
  visit("adapter_format", &C::adapter_format, "peft | mlx (default peft)");
  visit("threads", &C::threads,
        "Threads to use (default: all cores; under mpirun, the rank's share)");
  visit("bucket_mb", &C::bucket_mb,
        "mpirun: sum gradients over the ranks in buckets of this many MB (default 25)");
  visit("sync_check_every", &C::sync_check_every,
        "mpirun: check every N steps that all ranks hold the same parameters; 0 = off "
        "(default 100)");
  visit("compute", &C::compute, nullptr);
  visit("mmap", &C::mmap,
        "Map the weight files (pages come and go with the page cache: for machines short of "
        "memory) instead of reading them into 2 MB pages");
  visit("no_mmap", &C::no_mmap,
        "Read the weight files into 2 MB pages even when they exceed the memory available "
        "(default: read them when they fit, else map them)");
}

// "learning_rate" -> "--learning-rate".
std::string train_flag_name(const std::string& key);

}  // namespace glm4
