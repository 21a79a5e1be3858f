// glm4_moe_lite as llama.cpp's deepseek2: per-layer GGUF names, kv_b_proj split into attn_k_b
// (transposed) / attn_v_b, and rotate-half rotary rows reordered into deepseek2's adjacent pairs.
#pragma once
#include <string>
#include <vector>

#include "model/config.h"

namespace glm4 {

// How a GGUF tensor's values come from its single source (row-major [rows, cols] fp32).
enum class GgufReshape {
  None,
  KvbKeys,    // kv_b_proj [H * (nope + v), lora] -> attn_k_b [H, lora, nope]
  KvbValues,  // kv_b_proj -> attn_v_b [H, v, lora]
  RopeRowsQ,  // q (or q_b) rows: each head's rope tail from halves to pairs
  RopeRowsKv  // kv_a_proj_with_mqa rows: the rope tail after the latent, halves to pairs
};

// The deepseek2 name of glm4_moe_lite's layer tensor `rest` ("self_attn.q_a_proj.weight" ->
// "attn_q_a.weight"); kv_b_proj maps to the unsplit "attn_kv_b.weight". "" when the name is not
// an attention or norm tensor (the MLP is glm4moe's). Throws for attention biases, which
// llama.cpp's deepseek2 has no place for, naming the tensor by its full name `name`.
std::string deepseek2_layer_name(const std::string& rest, const std::string& name);

// The values `how` makes of one source tensor of `numel` values (KvbKeys / KvbValues: the
// heads' key or value rows of kv_b_proj only).
std::vector<float> gguf_reshape(const ModelConfig& c, GgufReshape how, const float* src,
                                int64_t numel);

// The row order `how` writes (RopeRowsQ / RopeRowsKv) for a tensor of `rows` rows: row i of the
// GGUF tensor is row order[i] of ours.
std::vector<int64_t> rope_row_order(const ModelConfig& c, GgufReshape how, int64_t rows);

}  // namespace glm4
