// The RoPE a config asks for: the default frequencies, or YaRN's blend of interpolated and
// extrapolated ones with its cos/sin factor (transformers' _compute_yarn_parameters semantics),
// and the extra softmax scale YaRN gives latent attention (mscale_all_dim).
#pragma once

#include "autograd/rope_style.h"
#include "model/config.h"

namespace glm4 {

// YaRN's get_mscale: 1 for scale <= 1, else 0.1 * mscale * ln(scale) + 1.
double yarn_get_mscale(double scale, double mscale = 1.0);

// The cos/sin multiplier of `y`: attention_factor when set, else mscale(factor, mscale) /
// mscale(factor, mscale_all_dim) when both are set and nonzero, else mscale(factor).
double yarn_attention_factor(const RopeScaling& y);

// The frequencies of c.rotary_dim rotated dims: theta^(-2i/rotary_dim) without rope_scaling;
// with YaRN, per pair i a linear ramp between the correction dims of beta_fast and beta_slow
// (over original_max_position_embeddings, floored / ceiled unless truncate is false) mixes
// theta^(-2i/d) / factor (interpolated) and theta^(-2i/d) (extrapolated); scale as above.
RopeFrequencies rope_frequencies(const ModelConfig& c);

// Latent attention's score multiplier on top of (qk_nope + qk_rope)^-0.5: mscale(factor,
// mscale_all_dim)^2 when YaRN sets a nonzero mscale_all_dim, else 1.
double latent_score_mscale(const ModelConfig& c);

}  // namespace glm4
