// The sampling chain, in the order llama.cpp and transformers apply it: penalty on raw logits,
// then temperature, then the truncation filters on the resulting distribution.
#include "infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.h"

namespace glm4 {

Sampler::Sampler(SamplerConfig config) : config_(config), rng_(config.seed) {
  GLM4_CHECK(std::isfinite(config.temperature) && config.temperature >= 0,
             "[sampler] temperature must be >= 0, got ", config.temperature);
  GLM4_CHECK(config.top_k >= 0, "[sampler] top_k must be >= 0, got ", config.top_k);
  GLM4_CHECK(config.top_p > 0 && config.top_p <= 1, "[sampler] top_p must be in (0, 1], got ",
             config.top_p);
  GLM4_CHECK(config.min_p >= 0 && config.min_p <= 1, "[sampler] min_p must be in [0, 1], got ",
             config.min_p);
  GLM4_CHECK(std::isfinite(config.repeat_penalty) && config.repeat_penalty > 0,
             "[sampler] repeat_penalty must be > 0, got ", config.repeat_penalty);
  GLM4_CHECK(config.repeat_last_n >= -1, "[sampler] repeat_last_n must be >= -1, got ",
             config.repeat_last_n);
}

double Sampler::uniform() { return double(rng_() >> 11) * (1.0 / 9007199254740992.0); }

void mask_undrawable(std::span<float> logits, int64_t drawable) {
  if (drawable <= 0 || drawable >= int64_t(logits.size())) return;
  std::fill(logits.begin() + drawable, logits.end(), -std::numeric_limits<float>::infinity());
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  const int64_t vocab = int64_t(logits.size());
  GLM4_CHECK(vocab > 0, "[sampler] empty logits");
  scratch_.assign(logits.begin(), logits.end());
  if (config_.repeat_penalty != 1 && config_.repeat_last_n != 0) {
    size_t n = config_.repeat_last_n < 0 ? history.size()
                                         : std::min(history.size(), size_t(config_.repeat_last_n));
    // From the raw logit, so a token is penalised once however often it occurs.
    for (int32_t id : history.subspan(history.size() - n)) {
      GLM4_CHECK(id >= 0 && id < vocab, "[sampler] history token ", id,
                 " outside the vocabulary of ", vocab);
      float raw = logits[size_t(id)];
      scratch_[size_t(id)] = raw > 0 ? raw / config_.repeat_penalty : raw * config_.repeat_penalty;
    }
  }

  if (config_.temperature <= 0) {  // greedy: the first maximum (lowest id on ties)
    int64_t best = -1;
    for (int64_t i = 0; i < vocab; ++i)
      if (!std::isnan(scratch_[size_t(i)]) &&
          (best < 0 || scratch_[size_t(i)] > scratch_[size_t(best)]))
        best = i;
    GLM4_CHECK(best >= 0 && scratch_[size_t(best)] > -INFINITY, "[sampler] no finite logit among ",
               vocab);
    return int32_t(best);
  }

  candidates_.clear();
  for (int64_t i = 0; i < vocab; ++i)
    if (scratch_[size_t(i)] > -INFINITY)  // also drops NaN
      candidates_.push_back({int32_t(i), scratch_[size_t(i)] / config_.temperature, 0.0});
  GLM4_CHECK(!candidates_.empty(), "[sampler] no finite logit among ", vocab);
  auto before = [](const Candidate& a, const Candidate& b) {
    return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
  };
  size_t keep = candidates_.size();
  if (config_.top_k > 0 && size_t(config_.top_k) < keep) {
    keep = size_t(config_.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + ptrdiff_t(keep), candidates_.end(),
                      before);
    candidates_.resize(keep);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), before);
  }

  // Softmax over the survivors, in double.
  double top = candidates_[0].logit, total = 0;
  for (Candidate& c : candidates_) total += c.prob = std::exp(double(c.logit) - top);
  for (Candidate& c : candidates_) c.prob /= total;

  if (config_.top_p < 1) {  // keep token i while the mass before it is below top_p
    double before_mass = 0;
    size_t n = 0;
    while (n < candidates_.size() && (n == 0 || before_mass < config_.top_p))
      before_mass += candidates_[n++].prob;
    candidates_.resize(n);
  }
  if (config_.min_p > 0) {  // relative to the most likely token; the first always survives
    double floor = config_.min_p * candidates_[0].prob;
    size_t n = 1;
    while (n < candidates_.size() && candidates_[n].prob >= floor) ++n;
    candidates_.resize(n);
  }

  double mass = 0;
  for (const Candidate& c : candidates_) mass += c.prob;
  double u = uniform() * mass, cum = 0;
  for (const Candidate& c : candidates_) {
    cum += c.prob;
    if (u < cum) return c.id;
  }
  return candidates_.back().id;  // u within rounding of the total
}

}  // namespace glm4
