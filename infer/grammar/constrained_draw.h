// One draw of a reply's next token under its optional constraints (a response_format grammar, a
// tool-call watch): both mask a copy of the logits when they restrict this step, the sampler
// draws from it, and both advance by the drawn token. Generator and the serve scheduler draw so.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "infer/grammar/call_watch.h"
#include "infer/grammar/constraint.h"
#include "infer/sampler.h"

namespace glm4::grammar {

// `grammar` and `calls` may be null; `scratch` holds the masked copy between calls.
int32_t draw_constrained(std::span<const float> logits, GrammarConstraint* grammar,
                         CallWatch* calls, std::vector<float>& scratch, Sampler& sampler,
                         std::span<const int32_t> history);

}  // namespace glm4::grammar
