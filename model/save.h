// Writes a model as a Hugging Face model directory (config.json + safetensors) in the key
// layout of its family, so that load_model and the reference implementations read it back.
#pragma once
#include <cstddef>
#include <filesystem>

#include "autograd/dtype.h"
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

}  // namespace glm4
