// The model a benchmark runs: a random one from a config in a stored form ("f32", "bf16",
// "f16", or "q4" / "q8" = mlx affine 4 / 8 bits in groups of 64 with bf16 scales, quantized
// matrix by matrix as generated), or a model directory from disk; and the bytes its matrices
// hold.
#pragma once
#include <memory>
#include <string>

#include "autograd/weight_quantize.h"
#include "base/check.h"
#include "model/glm4_model.h"
#include "model/save.h"

namespace glm4::bench {

inline std::unique_ptr<Glm4Model> make_model(const ModelConfig& config, const std::string& form) {
  auto model = std::make_unique<Glm4Model>(config);
  DType dtype;
  if (parse_dtype(form, &dtype)) {
    init_random(*model, 0, dtype);
    return model;
  }
  GLM4_CHECK(form == "q4" || form == "q8", "unknown weight form ", form,
             ": expected f32, bf16, f16, q4 or q8");
  const QuantFormat f{form == "q4" ? 4 : 8, 64};
  model->visit([&](const std::string& name, Param& p) {
    Weight w = random_param(config, 0, name, p.shape, DType::BF16);
    p.assign(p.is_matrix() ? quantize_weight(w, f, DType::BF16, name) : w);
  });
  return model;
}

// Bytes one decode step reads from the matrices: every layer linear and the output head (the
// embedding gives one row); of a MoE layer's routed experts, the num_experts_per_tok a token
// reaches (their average share).
inline double decode_weight_bytes(Glm4Model& model) {
  const ModelConfig& c = model.config;
  const double routed_share =
      c.n_routed_experts > 0 ? double(c.num_experts_per_tok) / double(c.n_routed_experts) : 1.0;
  double bytes = 0;
  model.visit_linears([&](const LinearSite& site, Linear& l) {
    const bool routed = site.path.find(".mlp.experts.") != std::string::npos;
    bytes += double(l.weight.frozen.bytes()) * (routed ? routed_share : 1.0);
  });
  if (!model.lm_head) bytes += double(model.embed_tokens.weight.frozen.bytes());
  return bytes;
}

// Bytes every frozen matrix holds (mapped or owned).
inline double matrix_bytes(Glm4Model& model) {
  double bytes = 0;
  model.visit([&](const std::string&, Param& p) { bytes += double(p.frozen.bytes()); });
  return bytes;
}

}  // namespace glm4::bench
