// The MoE oracle fixtures' batch, run and error measure (moe_batch_fixture.h).
#include "tests/support/moe_batch_fixture.h"

#include <algorithm>
#include <cmath>

#include "autograd/node.h"
#include "infer/generator.h"

namespace glm4::testing {

BatchFixture read_batch_fixture(const std::string& path, const std::string& prefix) {
  BatchFixture f;
  f.file = SafetensorsFile::open(path);
  const TensorInfo& ids = f.file->at(prefix + "input_ids");
  f.B = ids.shape[0];
  f.T = ids.shape[1];
  for (int64_t v : read_int(ids)) f.ids.push_back(int32_t(v));
  for (int64_t v : read_int(f.file->at(prefix + "lengths"))) f.lengths.push_back(int32_t(v));
  return f;
}

ForwardContext batch_context(const BatchFixture& f) {
  ForwardContext ctx;
  ctx.batch = f.B;
  ctx.seq = f.T;
  for (int64_t b = 0; b < f.B; ++b)
    for (int64_t t = 0; t < f.T; ++t) ctx.positions.push_back(int32_t(t));
  ctx.mask.kv_end = f.lengths;
  return ctx;
}

double max_abs_error(const float* a, const std::vector<float>& b, const BatchFixture& f,
                     int64_t width) {
  double worst = 0;
  for (int64_t bi = 0; bi < f.B; ++bi)
    for (int64_t t = 0; t < f.lengths[size_t(bi)]; ++t)
      for (int64_t j = 0; j < width; ++j) {
        const size_t i = size_t((bi * f.T + t) * width + j);
        worst = std::max(worst, double(std::abs(a[i] - b[i])));
      }
  return worst;
}

BatchRun run_batch(const Glm4Model& model, const BatchFixture& f) {
  NoGradGuard no_grad;
  BatchRun r;
  ForwardContext ctx = batch_context(f);
  ctx.layer_outputs = &r.layers;
  ctx.router_traces = &r.routes;
  r.hidden = model.forward_hidden(f.ids, ctx);
  r.logits = model.logits(r.hidden, ctx);
  return r;
}

GreedyRun run_greedy(const Glm4Model& model, const BatchFixture& f) {
  GreedyRun r;
  std::vector<int32_t> prompt;
  for (int64_t v : read_int(f.file->at("greedy_prompt"))) prompt.push_back(int32_t(v));
  for (int64_t v : read_int(f.file->at("greedy_ids"))) r.want.push_back(int32_t(v));
  GenerationConfig cfg;
  cfg.max_tokens = int(r.want.size());
  Generator gen(model, cfg);
  gen.start(prompt);
  while (auto t = gen.next()) r.got.push_back(*t);
  return r;
}

}  // namespace glm4::testing
