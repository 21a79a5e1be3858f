// llama.cpp's YaRN keys (rope.scaling.*) for a model with rope_scaling, or a refusal naming
// rope_scaling when llama.cpp would compute a different YaRN from the same file.
#pragma once
#include <string>

#include "export/gguf_writer.h"
#include "model/config.h"

namespace glm4 {

// Under the architecture prefix `a` ("glm4.", "glm4moe.", "deepseek2."): rope.scaling.type
// "yarn", rope.scaling.factor and rope.scaling.original_context_length, which llama.cpp reads for
// every architecture, and for deepseek2 rope.scaling.yarn_log_multiplier (0.1 * mscale_all_dim,
// as its converter writes it). Nothing without c.rope_scaling. llama.cpp always takes beta_fast
// 32, beta_slow 1, a truncated correction range and its own attention factors, so a model whose
// YaRN differs in any of them is refused.
void yarn_keys(const ModelConfig& c, GgufWriter& w, const std::string& a);

}  // namespace glm4
