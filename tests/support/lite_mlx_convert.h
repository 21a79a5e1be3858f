// A test-side converter of a glm4_moe_lite model directory in the transformers layout into the
// layout mlx-lm's convert writes (glm4_moe_lite.py's sanitize, then optional quantization).
#pragma once
#include <filesystem>
#include <optional>

#include "autograd/kernels/quantized_matrix.h"
#include "base/dtype.h"

namespace glm4::testing {

// Writes mlx_dir from hf_dir (one model.safetensors, any float dtype): the multi-token-prediction
// layers dropped; each layer's experts stacked into mlp.switch_mlp.{gate,up,down}_proj [E, out,
// in]; kv_b_proj [H * (nope + v), kv_lora] split per head into self_attn.embed_q [H, kv_lora,
// nope] (the key rows transposed) and self_attn.unembed_out [H, v, kv_lora]. With `quant`, every
// matrix of a linear layer, the embedding, lm_head, the stacked experts and both halves is
// quantized along its last axis (mlx affine, the scales in the tensor's dtype) when the group
// size divides that axis, as mlx-lm's convert does; the router, norms and vectors stay as they
// are. config.json gets mlx-lm's "quantization" and "quantization_config".
//
// oracle_dir (when not empty) receives the same model in the transformers layout: every matrix
// with the very codes (or values) of mlx_dir, and kv_b_proj dense, rebuilt from the values its
// two halves dequantize to, so that loading it must give the same numbers as loading mlx_dir.
void write_lite_mlx(const std::filesystem::path& hf_dir, const std::filesystem::path& mlx_dir,
                    std::optional<QuantFormat> quant = std::nullopt,
                    const std::filesystem::path& oracle_dir = {});

// A random glm4_moe_lite model (transformers layout, matrices in `dtype`) with the config of
// `like` but attention wide enough for mlx's groups of 32 along each half's last axis:
// kv_lora_rank 64, qk_nope_head_dim 32, v_head_dim 32 (embed_q [H, 64, 32], unembed_out
// [H, 32, 64]), and no attention biases, as GLM-4.7-Flash.
void write_wide_lite(const std::filesystem::path& like, const std::filesystem::path& dir,
                     DType dtype, uint64_t seed = 5);

}  // namespace glm4::testing
