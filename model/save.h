// Writes a model as a Hugging Face model directory (config.json + safetensors) in the key
// layout of its family, so that load_model and the reference implementations read it back.
#pragma once
#include <cstddef>
#include <filesystem>

#include "base/dtype.h"
#include "model/config.h"
#include "model/glm4_model.h"

namespace glm4 {

// Every tensor of `model`, converted to `dtype` (one rounding from the stored values), under
// the checkpoint keys of `config`'s family: ChatGLM's q/k/v go back into one query_key_value
// tensor (rows q | k | v). `config` must describe the same shapes as model.config; it is
// written as out_dir/config.json with torch_dtype = dtype. Shards at max_shard_bytes (0 = one
// file). Matrices already stored in `dtype` are written without a copy.
void save_model(Glm4Model& model, const ModelConfig& config, const std::filesystem::path& out_dir,
                DType dtype, size_t max_shard_bytes = 0);

// The same with the model's own config, plus a generation_config.json (eos and pad ids): a
// complete model directory (glm4 init, --full training).
void save_model(Glm4Model& model, const std::filesystem::path& dir, DType dtype,
                size_t max_shard_bytes = 0);

// What makes a model directory complete besides weights and config.json: copies the tokenizer
// files and generation_config.json from `base_dir` (the model it was derived from) into
// `out_dir`, and writes a generation_config.json from `config` when `base_dir` has none.
// Used by fuse and --full training so their outputs load and generate like the base.
void copy_model_companions(const std::filesystem::path& base_dir, const std::filesystem::path& out_dir,
                           const ModelConfig& config);

// Hugging Face's _init_weights: every matrix and the embedding ~ normal(0, initializer_range)
// (config.json's value, else 0.02), the embedding row of pad_token_id zero (glm4/glm, as
// nn.Embedding's padding_idx does), norm weights 1, biases 0. Each tensor draws from its own
// std::mt19937_64 streams keyed by the seed and its name, with a Box-Muller transform, so a
// seed gives the same model on every machine and thread count. Matrices are stored frozen in
// `storage` (rounded once from fp32); vectors are fp32. LoRA modules are untouched.
void init_random(Glm4Model& model, uint64_t seed, DType storage = DType::F32);

}  // namespace glm4
