// Fixed companions of fuzzed files, shared by the targets and by fuzz_make_seeds (so a seed
// matches what the target expects beside it): the parameters of a training state, an adapter
// and the shards an index points to.
#pragma once
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "model/adapter/adapter_files.h"
#include "train/adamw.h"

namespace glm4::fuzz {

// Two small trainable parameters; a fuzzed checkpoint.h5 is loaded into them.
std::vector<std::pair<std::string, Tensor>> training_params();

// A rank-2 adapter on layer 0's q_proj and v_proj of a 4-wide model, written in `format`
// ("peft" | "mlx") into `dir`; returns nothing, the files are the fixture.
void write_adapter_fixture(const std::filesystem::path& dir, const std::string& format);

// Two shards, model-00001-of-00002.safetensors ("a", "b") and model-00002-of-00002.safetensors
// ("c"), in `dir`: what a fuzzed model.safetensors.index.json may point to.
void write_shard_fixture(const std::filesystem::path& dir);

}  // namespace glm4::fuzz
