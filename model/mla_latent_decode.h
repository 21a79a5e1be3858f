// Latent attention computed in the latent space (MLA's decode form): kv_b_proj's key half is
// folded into each query head, scores are taken against the cached latents and shared rotary
// keys directly, and its value half is applied after the weighted sum, so per-head keys and
// values are never expanded. Reads each cached token's kv_lora_rank + qk_rope_head_dim values.
#pragma once
#include <cstdint>

#include "autograd/tensor.h"
#include "model/param.h"

namespace glm4 {

struct LatentShape {
  int64_t heads = 0, kv_lora_rank = 0, nope_dim = 0, rope_dim = 0, v_dim = 0;
};

// q [1, T, H, nope + rope] (rotary part already rotated), cached [1, S, 1, kv_lora + rope] (the
// normed latent, then the rotated shared key) of which the last T are these queries' own tokens;
// kv_b [H * (nope + v), kv_lora] in any storage. Causal, scale (nope + rope)^-0.5.
// -> [1, T, H, v]. No tape.
Tensor latent_attention(const Tensor& q, const Tensor& cached, const Param& kv_b,
                        const LatentShape& s);

}  // namespace glm4
