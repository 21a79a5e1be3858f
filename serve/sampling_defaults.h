// What a request that leaves out temperature, top_p or top_k samples with: the model directory's
// generation_config.json when it sets them (as vLLM does), else OpenAI's defaults (temperature 1,
// top_p 1, no top-k).
#pragma once
#include <filesystem>
#include <string>

#include "infer/sampler.h"

namespace glm4::serve {

struct SamplingDefaults {
  SamplerConfig sampling;  // temperature, top_p, top_k, min_p, repeat_penalty
  std::string source;      // "generation_config.json" or "OpenAI defaults", for the start line
};

// Reads temperature, top_p, top_k, min_p and repetition_penalty from DIR/generation_config.json
// (each optional; do_sample is not read, as in vLLM). Throws glm4::Error naming the file and the
// field for a value of the wrong type or out of range.
SamplingDefaults load_sampling_defaults(const std::filesystem::path& model_dir);

}  // namespace glm4::serve
