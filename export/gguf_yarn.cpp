// YaRN in GGUF: what llama.cpp reads (src/llama-model.cpp, src/llama-context.cpp,
// src/models/deepseek2.cpp) and the cases where its YaRN would not be the model's.
#include "export/gguf_yarn.h"

#include <cmath>

#include "base/check.h"
#include "model/rope_scaling.h"

namespace glm4 {
namespace {

bool close(double a, double b) { return std::abs(a - b) <= 1e-6 * std::max(1.0, std::abs(b)); }

[[noreturn]] void refuse(const std::string& why) {
  fail("gguf export: rope_scaling (YaRN) ", why,
       "; llama.cpp would run this model with a different RoPE, so it is not exported");
}

}  // namespace

void yarn_keys(const ModelConfig& c, GgufWriter& w, const std::string& a) {
  if (!c.rope_scaling) return;
  const RopeScaling& y = *c.rope_scaling;
  const bool deepseek2 = a == "deepseek2.";
  if (y.factor < 1.0) refuse(str_cat("has factor ", y.factor, " below 1"));
  if (y.beta_fast.value_or(0.0) != 0.0 && *y.beta_fast != 32.0)
    refuse(str_cat("has beta_fast ", *y.beta_fast, "; llama.cpp always takes 32"));
  if (y.beta_slow.value_or(0.0) != 0.0 && *y.beta_slow != 1.0)
    refuse(str_cat("has beta_slow ", *y.beta_slow, "; llama.cpp always takes 1"));
  if (!y.truncate.value_or(true))
    refuse("has truncate false; llama.cpp always floors and ceils the correction range");
  // llama.cpp's cos/sin factor: mscale(factor), or 1 for deepseek2 with yarn_log_multiplier
  // (it takes mscale == mscale_all_dim there); deepseek2's softmax scale gains the square of
  // that factor times 1 + 0.1 * mscale_all_dim * ln(factor).
  const double mscale_all_dim = y.mscale_all_dim.value_or(0.0);
  const double llama_rope = deepseek2 && mscale_all_dim != 0.0 ? 1.0 : yarn_get_mscale(y.factor);
  const double ours = yarn_attention_factor(y);
  if (!close(llama_rope, ours))
    refuse(str_cat("scales cos/sin by ", ours, " where llama.cpp takes ", llama_rope));
  if (deepseek2) {
    const double m = llama_rope * (1.0 + 0.1 * mscale_all_dim * std::log(y.factor));
    if (!close(m * m, latent_score_mscale(c)))
      refuse(str_cat("scales attention scores by ", latent_score_mscale(c),
                     " where llama.cpp's deepseek2 takes ", m * m,
                     " (set mscale_all_dim for latent attention)"));
  }
  w.set(a + "rope.scaling.type", GgufValue::of_string("yarn"));
  w.set(a + "rope.scaling.factor", GgufValue::of_f32(float(y.factor)));
  const int64_t original = y.original_max_position_embeddings.value_or(c.max_position_embeddings);
  GLM4_CHECK(original > 0 && original <= int64_t(UINT32_MAX),
             "gguf export: ", "rope_scaling.original_max_position_embeddings ", original,
             " does not fit uint32");
  w.set(a + "rope.scaling.original_context_length", GgufValue::of_u32(uint32_t(original)));
  if (deepseek2 && mscale_all_dim != 0.0)
    w.set(a + "rope.scaling.yarn_log_multiplier", GgufValue::of_f32(float(0.1 * mscale_all_dim)));
}

}  // namespace glm4
