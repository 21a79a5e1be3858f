#include "tests/support/fixture_logits.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "autograd/node.h"
#include "io/safetensors.h"

namespace glm4::testing {

std::vector<float> fixture_batch_logits(const Glm4Model& model, const std::string& fixture_file) {
  auto file = SafetensorsFile::open(fixture_file);
  const TensorInfo& t = file->at("input_ids");
  std::vector<int32_t> ids, lengths;
  for (int64_t v : read_int(t)) ids.push_back(int32_t(v));
  for (int64_t v : read_int(file->at("lengths"))) lengths.push_back(int32_t(v));
  NoGradGuard no_grad;
  ForwardContext ctx;
  ctx.batch = t.shape[0];
  ctx.seq = t.shape[1];
  for (int64_t b = 0; b < ctx.batch; ++b)
    for (int64_t i = 0; i < ctx.seq; ++i) ctx.positions.push_back(int32_t(i));
  ctx.mask.kv_end = lengths;
  return model.logits(model.forward_hidden(ids, ctx), ctx).to_vector();
}

double max_abs_error(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(worst, double(std::abs(a[i] - b[i])));
  return worst;
}

double max_relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 0;
  for (float v : b) scale = std::max(scale, double(std::abs(v)));
  return max_abs_error(a, b) / scale;
}

std::vector<float> short_prompt_logits(const Glm4Model& model) {
  NoGradGuard no_grad;
  const std::vector<int32_t> ids{5, 17, 200, 3, 9, 41};
  ForwardContext ctx;
  ctx.seq = int64_t(ids.size());
  for (size_t t = 0; t < ids.size(); ++t) ctx.positions.push_back(int32_t(t));
  return model.logits(model.forward_hidden(ids, ctx), ctx).to_vector();
}

}  // namespace glm4::testing
