#include "tests/support/cached_decode.h"

#include <algorithm>
#include <cmath>

#include "autograd/node.h"

namespace glm4::testing {

std::vector<float> recompute_last(const Glm4Model& model, const std::vector<int32_t>& ids) {
  NoGradGuard no_grad;
  ForwardContext ctx;
  ctx.seq = int64_t(ids.size());
  for (size_t t = 0; t < ids.size(); ++t) ctx.positions.push_back(int32_t(t));
  const Tensor logits = model.logits(model.forward_hidden(ids, ctx), ctx);  // [1, T, V]
  const int64_t V = model.config.vocab_size;
  const float* last = logits.data() + (ctx.seq - 1) * V;
  return std::vector<float>(last, last + V);
}

CachedDecodeGap cached_decode_gap(const Glm4Model& model, const std::vector<int32_t>& prompt,
                                  const GenerationConfig& cfg) {
  Generator gen(model, cfg);
  gen.start(prompt);
  std::vector<int32_t> seq = prompt;
  CachedDecodeGap gap;
  auto compare = [&] {  // last_logits() is what the next token is drawn from: the logits after seq
    const std::vector<float> want = recompute_last(model, seq);
    const std::vector<float>& got = gen.last_logits();
    for (size_t i = 0; i < want.size(); ++i) {
      gap.worst = std::max(gap.worst, double(std::abs(got[i] - want[i])));
      gap.largest = std::max(gap.largest, double(std::abs(want[i])));
    }
  };
  compare();
  while (auto t = gen.next()) {
    compare();
    seq.push_back(*t);
    ++gap.drawn;
  }
  return gap;
}

}  // namespace glm4::testing
