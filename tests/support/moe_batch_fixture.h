// A padded batch of an MoE oracle fixture (tests/data/moe*/NAME/fixture.safetensors: input_ids
// [B, T] and valid lengths), the model run over it with each layer's output and routing kept, and
// the error over the valid positions. Shared by the glm4_moe and glm4_moe_lite parity tests.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/forward_context.h"
#include "model/glm4_model.h"

namespace glm4::testing {

struct BatchFixture {
  std::vector<int32_t> ids, lengths;
  int64_t B = 0, T = 0;
  std::shared_ptr<SafetensorsFile> file;
};

// `prefix` + "input_ids" / "lengths" of the fixture file at `path`.
BatchFixture read_batch_fixture(const std::string& path, const std::string& prefix = "");

// Positions 0..T-1 for every row, keys masked past each row's length.
ForwardContext batch_context(const BatchFixture& f);

// Largest |a - b| over the valid positions of the batch, rows of `width` values.
double max_abs_error(const float* a, const std::vector<float>& b, const BatchFixture& f,
                     int64_t width);

struct BatchRun {
  std::vector<Tensor> layers;
  std::vector<RouterTrace> routes;
  Tensor hidden, logits;
};
// The model over the whole batch without gradients.
BatchRun run_batch(const Glm4Model& model, const BatchFixture& f);

// Greedy decoding of the fixture's greedy_prompt through the model's KV cache (Generator), and
// the reference's greedy_ids it should give.
struct GreedyRun {
  std::vector<int32_t> got, want;
};
GreedyRun run_greedy(const Glm4Model& model, const BatchFixture& f);

}  // namespace glm4::testing
