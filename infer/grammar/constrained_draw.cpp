// Masks, draws and advances the constraints of one reply's step (constrained_draw.h).
#include "infer/grammar/constrained_draw.h"

namespace glm4::grammar {

int32_t draw_constrained(std::span<const float> logits, GrammarConstraint* grammar,
                         CallWatch* calls, std::vector<float>& scratch, Sampler& sampler,
                         std::span<const int32_t> history) {
  if (grammar || (calls && calls->masking())) {
    scratch.assign(logits.begin(), logits.end());
    if (grammar) grammar->mask(scratch);
    if (calls) calls->mask(scratch);
    logits = scratch;
  }
  const int32_t token = sampler.sample(logits, history);
  if (grammar) grammar->accept(token);
  if (calls) calls->accept(token);
  return token;
}

}  // namespace glm4::grammar
