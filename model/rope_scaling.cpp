// YaRN RoPE frequencies and scales from a ModelConfig, written from the semantics of
// transformers' _compute_yarn_parameters and the DeepSeek-V3 / GLM-4.7-Flash attention scaling.
#include "model/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "autograd/ops.h"

namespace glm4 {

double yarn_get_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

double yarn_attention_factor(const RopeScaling& y) {
  if (y.attention_factor) return *y.attention_factor;
  if (y.mscale.value_or(0.0) != 0.0 && y.mscale_all_dim.value_or(0.0) != 0.0)
    return yarn_get_mscale(y.factor, *y.mscale) / yarn_get_mscale(y.factor, *y.mscale_all_dim);
  return yarn_get_mscale(y.factor);
}

RopeFrequencies rope_frequencies(const ModelConfig& c) {
  if (!c.rope_scaling) return ops::default_rope_frequencies(c.rotary_dim, c.rope_theta);
  const RopeScaling& y = *c.rope_scaling;
  const double dim = double(c.rotary_dim), base = c.rope_theta;
  const double original =
      double(y.original_max_position_embeddings.value_or(c.max_position_embeddings));
  // beta_fast / beta_slow are read as Python's `value or default`: 0 means the default too
  const double beta_fast = y.beta_fast.value_or(0.0) != 0.0 ? *y.beta_fast : 32.0;
  const double beta_slow = y.beta_slow.value_or(0.0) != 0.0 ? *y.beta_slow : 1.0;
  // the dim whose wavelength turns `rotations` times over the original context
  auto correction_dim = [&](double rotations) {
    return dim * std::log(original / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
  };
  double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
  if (y.truncate.value_or(true)) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1.0);
  if (low == high) high += 0.001;  // as the reference: no division by zero
  RopeFrequencies f;
  f.inv_freq.resize(size_t(c.rotary_dim / 2));
  for (int64_t i = 0; i < c.rotary_dim / 2; ++i) {
    const double pos_freq = std::pow(base, double(2 * i) / dim);
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolated = 1.0 - ramp;  // share of the unscaled frequency
    f.inv_freq[size_t(i)] =
        float(1.0 / (y.factor * pos_freq) * ramp + 1.0 / pos_freq * extrapolated);
  }
  f.scale = float(yarn_attention_factor(y));
  return f;
}

double latent_score_mscale(const ModelConfig& c) {
  if (!c.rope_scaling || c.rope_scaling->mscale_all_dim.value_or(0.0) == 0.0) return 1.0;
  const double m = yarn_get_mscale(c.rope_scaling->factor, *c.rope_scaling->mscale_all_dim);
  return m * m;
}

}  // namespace glm4
