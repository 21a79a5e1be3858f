// A --config file as glm4 reads it: JSON only (a YAML file is refused as such, not as broken
// JSON), with the keys that mlx-lm's and PEFT/TRL's configs spell differently for the same
// setting renamed to glm4's, and for the other keys of those tools a hint naming glm4's.
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace glm4 {

// The file's settings under glm4's keys (translate_foreign_keys applied). Throws glm4::Error
// "PATH: expected JSON, ..." for YAML, else read_json_file's errors.
nlohmann::json read_config_file(const std::filesystem::path& path);

// Renames the keys whose meaning is glm4's exactly: adapter_path -> out, lora_layers -> num_layers,
// grad_accumulation_steps / gradient_accumulation_steps -> grad_accum, max_steps -> iters,
// warmup_steps -> warmup, per_device_train_batch_size -> batch_size, gradient_checkpointing ->
// grad_checkpoint, r -> lora_rank, target_modules -> lora_targets, and mlx-lm's lora_parameters
// {rank, scale, dropout, keys} -> lora_rank, lora_alpha (= scale x rank), lora_dropout,
// lora_targets. A key given under both names is refused, naming both; `source` names the file.
nlohmann::json translate_foreign_keys(const nlohmann::json& config, const std::string& source);

// For a key glm4 does not know that another tool's config uses: what glm4 does instead, naming
// its key and flag; "" for any other key.
std::string foreign_key_hint(const std::string& key);

}  // namespace glm4
