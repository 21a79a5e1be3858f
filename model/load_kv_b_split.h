// kv_b_proj rebuilt from mlx-lm's glm4_moe_lite conversions, which store it split per head as
// self_attn.embed_q (the key half, transposed) and self_attn.unembed_out (the value half).
#pragma once
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "autograd/weight.h"
#include "io/model_files.h"
#include "model/config.h"

namespace glm4 {

// How one half is stored: nullopt when dense, else its affine format (config.json decides, as
// for any matrix).
struct KvBSplitFormats {
  std::optional<QuantFormat> embed_q, unembed_out;
};

// kv_b_proj [H * (nope + v), kv_lora] of the attention module `attn` (model.layers.N.self_attn)
// from ATTN.embed_q [H, kv_lora, nope] and ATTN.unembed_out [H, v, kv_lora]: head h's rows are
// embed_q[h]^T, then unembed_out[h]. Dense halves keep their values and dtype exactly. A
// quantized half (its groups run along its last axis, so embed_q's along nope) is dequantized
// as mlx does, into the scales' dtype: kv_b_proj is then held dense, an owned copy of about
// 9 MB a layer at GLM-4.7-Flash's shape (0.4 GB over 47 layers in bf16), which `extra_bytes`
// counts. The keys read go into `used`, absent ones into `missing`; throws naming `dir` and the
// key on a half without the other, a shape that config.json does not give, or mixed dtypes.
Weight load_kv_b_split(const ModelConfig& c, const ModelFiles& files, const std::string& attn,
                       KvBSplitFormats formats, const std::string& dir, std::set<std::string>& used,
                       std::vector<std::string>& missing, size_t& extra_bytes);

// After load_kv_b_split: frees the memory of the halves' keys in `files` (their values now live
// in the rebuilt kv_b_proj, so the model keeps one copy).
void discard_kv_b_split(ModelFiles& files, const std::string& attn);

}  // namespace glm4
