// A model's weights from nothing (Hugging Face's random initialisation, reproducible from a seed)
// and a model written back as a Hugging Face model directory in its family's layout.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "autograd/dtype.h"

namespace glm4 {

class Glm4Model;

// Hugging Face's _init_weights: every matrix and the embedding ~ normal(0, initializer_range)
// (config.json's value, else 0.02), the embedding row of pad_token_id zero (glm4/glm, as
// nn.Embedding's padding_idx does), norm weights 1, biases 0. Each tensor draws from its own
// std::mt19937_64 streams keyed by the seed and its name, with a Box-Muller transform written
// here, so a seed gives the same model on every machine and thread count. Matrices are stored
// frozen in `storage` (rounded once from fp32); vectors are fp32. LoRA modules are untouched.
void init_random(Glm4Model& model, uint64_t seed, DType storage = DType::F32);

// Writes DIR (created if missing) as a Hugging Face model directory: config.json (torch_dtype =
// `dtype`), generation_config.json (eos and pad ids) and the weights in `dtype` under the
// family's key names (ChatGLM: q|k|v rows concatenated back into query_key_value) as one
// model.safetensors or, past max_shard_bytes (0 = never), shards plus an index. LoRA modules are
// not part of the weights (merge them first). Every file is written atomically.
void save_model(Glm4Model& model, const std::filesystem::path& dir, DType dtype,
                size_t max_shard_bytes = 0);

}  // namespace glm4
