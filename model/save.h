// Writes a model as a Hugging Face model directory (config.json + safetensors) in the key
// layout of its family, so that load_model and the reference implementations read it back.
#pragma once
#include <cstddef>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "model/config.h"
#include "model/glm4_model.h"

namespace glm4 {

// How save_model writes the matrices. Tensors are produced one at a time as the files are
// written, so the written form of the model never exists in memory as a whole.
struct SaveOptions {
  DType dtype = DType::F32;    // dense tensors: vectors, and matrices not written quantized
  size_t max_shard_bytes = 0;  // 0 = one file
  // Matrices held quantized are written as they are, bit for bit, unless this is set: then
  // they are dequantized to `dtype` (glm4 fuse --dequantize).
  bool dequantize = false;
  // glm4 quantize / init --bits: the format each matrix is written in (nullopt: dense in
  // `dtype`), by module path ("model.layers.0.mlp.down_proj"). A matrix held quantized in that
  // format is written as it is; any other is quantized from its values rounded to `dtype`,
  // which the scales and biases get.
  std::function<std::optional<QuantFormat>(const std::string& module, const Param& p)> quantize;
  // The values to write for a parameter instead of what it holds, called when its turn comes
  // (init --bits generates each matrix then; fuse merges each adapted one then). Any Weight of
  // the param's element count; not called for matrices written as they are held.
  std::function<Weight(const std::string& name, const Param& p)> source;
  std::string progress_label;  // non-empty: a progress bar with this label while writing
};

// Every tensor of `model` under the checkpoint keys of `config`'s family, as `o` says, into
// out_dir (config.json with torch_dtype = o.dtype and a "quantization" section, as mlx-lm writes
// it, describing exactly the modules written quantized: the most common format as the default,
// an override for the others, false for the dense matrices). ChatGLM's q/k/v go back into one
// query_key_value tensor (rows q | k | v); quantized ChatGLM files are not supported. glm4_moe
// is written in the per-expert layout of transformers, its e_score_correction_bias in F32 whatever
// o.dtype (as transformers keeps it), and without multi-token-prediction layers (config.json's
// num_nextn_predict_layers says 0).
void save_model(Glm4Model& model, const ModelConfig& config, const std::filesystem::path& out_dir,
                const SaveOptions& o);

// The modules save_model asks SaveOptions::quantize about: each matrix "<module>.weight" of
// `model`, by its module path (what --keep rules name).
std::vector<std::string> quantizable_modules(Glm4Model& model);

// Every tensor of `model`, converted to `dtype` (one rounding from the stored values), under
// the checkpoint keys of `config`'s family: ChatGLM's q/k/v go back into one query_key_value
// tensor (rows q | k | v). `config` must describe the same shapes as model.config; it is
// written as out_dir/config.json with torch_dtype = dtype. Shards at max_shard_bytes (0 = one
// file). Matrices already stored in `dtype` are written without a copy; quantized ones as they
// are (save_model with SaveOptions for more).
void save_model(Glm4Model& model, const ModelConfig& config, const std::filesystem::path& out_dir,
                DType dtype, size_t max_shard_bytes = 0);

// The same with the model's own config, plus a generation_config.json (eos and pad ids): a
// complete model directory (glm4 init, --full training).
void save_model(Glm4Model& model, const std::filesystem::path& dir, DType dtype,
                size_t max_shard_bytes = 0);

// DIR/generation_config.json (eos and pad ids) from `config`, as save_model(model, dir, ...) writes
// it.
void write_generation_config(const ModelConfig& config, const std::filesystem::path& dir);

// What makes a model directory complete besides weights and config.json: copies the tokenizer
// files and generation_config.json from `base_dir` (the model it was derived from) into
// `out_dir`, and writes a generation_config.json from `config` when `base_dir` has none.
// Used by fuse and --full training so their outputs load and generate like the base.
void copy_model_companions(const std::filesystem::path& base_dir,
                           const std::filesystem::path& out_dir, const ModelConfig& config);

// Hugging Face's _init_weights: every matrix and the embedding ~ normal(0, initializer_range)
// (config.json's value, else 0.02), the embedding row of pad_token_id zero (glm4/glm, as
// nn.Embedding's padding_idx does), norm weights 1, biases (and glm4_moe's
// e_score_correction_bias) 0. Each tensor draws from its own
// std::mt19937_64 streams keyed by the seed and its name, with a Box-Muller transform, so a
// seed gives the same model on every machine and thread count. Matrices are stored frozen in
// `storage` (rounded once from fp32); vectors are fp32. LoRA modules are untouched.
void init_random(Glm4Model& model, uint64_t seed, DType storage = DType::F32);

// What init_random gives the parameter `name` of shape `shape`, bit for bit, made on its own:
// glm4 init --bits writes a model one generated matrix at a time with it.
Weight random_param(const ModelConfig& config, uint64_t seed, const std::string& name,
                    const Shape& shape, DType storage = DType::F32);

}  // namespace glm4
