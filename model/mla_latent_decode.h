// Latent attention computed in the latent space (MLA's decode form): kv_b_proj's key half is
// folded into each query head, scores are taken against the cached latents and shared rotary
// keys directly, and its value half is applied after the weighted sum, so per-head keys and
// values are never expanded. Reads each cached token's kv_lora_rank + qk_rope_head_dim values.
#pragma once
#include <cstdint>

#include "autograd/compute_dtype.h"
#include "autograd/tensor.h"
#include "model/kv_cache.h"
#include "model/param.h"

namespace glm4 {

struct LatentShape {
  int64_t heads = 0, kv_lora_rank = 0, nope_dim = 0, rope_dim = 0, v_dim = 0;
  double score_mscale = 1.0;  // YaRN's mscale^2 (mscale_all_dim) on the softmax scale
};

// q [1, T, H, nope + rope] (rotary part already rotated), cached [1, S, 1, kv_lora + rope] (the
// normed latent, then the rotated shared key) of which the last T are these queries' own tokens;
// Score entries ([heads x queries, cached tokens] floats) latent_attention holds at once: a long
// prompt run through the cache in one chunk is taken in blocks of queries that fit.
inline constexpr int64_t kLatentScoreBudget = int64_t(1) << 22;

// kv_b [H * (nope + v), kv_lora] in any storage, read in place. Causal, scale (nope + rope)^-0.5
// times s.score_mscale. The key half folds q in fp32 (whatever `compute`); the value half runs as
// `compute` says, as kv_b_proj's own forward would. -> [1, T, H, v]. No tape.
Tensor latent_attention(const Tensor& q, const Tensor& cached, const Param& kv_b,
                        const LatentShape& s, const ComputeChoice& compute,
                        int64_t score_budget = kLatentScoreBudget);
// The same over a cache's keys as it holds them (fp32 or bf16, widened as they are read).
Tensor latent_attention(const Tensor& q, const CachedTokens& cached, const Param& kv_b,
                        const LatentShape& s, const ComputeChoice& compute,
                        int64_t score_budget = kLatentScoreBudget);

}  // namespace glm4
