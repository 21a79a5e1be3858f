// glm4_moe_lite through the shared quantized paths: init --bits 4's writer (every matrix 4-bit,
// the router kept dense), the latent decode reading a bf16, 4-bit or 8-bit kv_b_proj equal to
// full recomputation, and QLoRA on every linear giving each latent projection a gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <string>

#include "autograd/node.h"
#include "dataset/batch.h"
#include "dataset/dataset.h"
#include "infer/cached_forward.h"
#include "infer/score.h"
#include "model/glm4_model.h"
#include "model/lora.h"
#include "model/quant_plan.h"
#include "model/save.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

// Every matrix's input width a multiple of 64 (the group size).
ModelConfig aligned_config() {
  return parse_model_config(nlohmann::json::parse(R"({"model_type": "glm4_moe_lite",
    "vocab_size": 128, "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 2, "q_lora_rank": 64, "kv_lora_rank": 64,
    "qk_nope_head_dim": 32, "qk_rope_head_dim": 32, "v_head_dim": 64, "n_routed_experts": 4,
    "num_experts_per_tok": 2, "eos_token_id": 1, "pad_token_id": 0})"),
                            "aligned");
}

// A random model saved with every matrix at `bits` (4 or 8; 0 keeps them bf16) and loaded back.
std::unique_ptr<Glm4Model> quantized_model(const testing::TempDir& tmp, int bits = 4) {
  const ModelConfig c = aligned_config();
  Glm4Model model(c);
  const QuantPlan plan = QuantPlan::parse({bits > 0 ? bits : 4, 64}, {}, "--keep");
  SaveOptions save;
  save.dtype = DType::BF16;
  if (bits > 0)
    save.quantize = [&](const std::string& module, const Param& p) {
      return plan.format_for(module, p.shape[1]);
    };
  save.source = [&](const std::string& name, const Param& p) {
    return random_param(c, 3, name, p.shape, DType::BF16);
  };
  save_model(model, c, tmp.path(), save);
  return load_model(tmp.path());
}

class MoeLiteStored : public ::testing::TestWithParam<int> {};

TEST_P(MoeLiteStored, LatentDecodeEqualsFullRecomputation) {
  testing::TempDir tmp;
  const int bits = GetParam();
  auto model = quantized_model(tmp, bits);
  const auto& attn = std::get<MlaAttention>(model->layers[1].self_attn);
  const Weight& kv_b = attn.kv_b_proj.weight.frozen;
  EXPECT_EQ(kv_b.is_quantized(), bits > 0);
  if (bits > 0)
    EXPECT_EQ(kv_b.quant().bits, bits);
  else
    EXPECT_EQ(kv_b.dtype(), DType::BF16);
  EXPECT_EQ(attn.q_a_proj->weight.frozen.is_quantized(), bits > 0);
  EXPECT_FALSE(std::get<MoeBlock>(model->layers[1].mlp).gate.weight.frozen.is_quantized());
  const std::vector<int32_t> ids{5, 17, 100, 3, 9, 41, 77, 2};
  KvCache cache = make_cache(*model);
  std::vector<float> last;
  for (size_t i = 0; i < ids.size(); ++i) {
    CachedRow row{&cache, std::span<const int32_t>(ids.data() + i, 1), int64_t(i)};
    last = cached_forward(*model, {&row, 1}, true).to_vector();
  }
  NoGradGuard no_grad;
  ForwardContext ctx;
  ctx.seq = int64_t(ids.size());
  for (size_t t = 0; t < ids.size(); ++t) ctx.positions.push_back(int32_t(t));
  const Tensor full = model->logits(model->forward_hidden(ids, ctx), ctx);
  const int64_t V = model->config.vocab_size;
  double worst = 0;
  for (int64_t v = 0; v < V; ++v)
    worst = std::max(
        worst, double(std::abs(last[size_t(v)] - full.data()[(int64_t(ids.size()) - 1) * V + v])));
  EXPECT_LE(worst, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Bits, MoeLiteStored, ::testing::Values(0, 4, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 0 ? std::string("bf16")
                                                  : "q" + std::to_string(info.param);
                         });

TEST(MoeLiteQuant, QloraOnEveryLinearReachesTheLatentProjections) {
  testing::TempDir tmp;
  auto model = quantized_model(tmp);
  LoraConfig lora;
  lora.targets = {"all-linear"};
  lora.rank = 4;
  model->add_lora(lora, 9);
  std::vector<std::pair<std::string, Tensor>> params = model->lora_parameters();
  const std::vector<int32_t> ids{5, 17, 100, 3, 9, 41, 77, 2};
  const Batch batch = make_batch({Example{ids, ids}}, 0, 1, 0);
  ASSERT_EQ(batch.target_tokens, 7);
  Tensor loss = batch_loss(*model, batch, {.training = true});
  EXPECT_TRUE(std::isfinite(loss.item()));
  backward(loss);
  int latent = 0;
  for (auto& [name, t] : params) {
    const bool is_latent = name.find("q_a_proj") != std::string::npos ||
                           name.find("q_b_proj") != std::string::npos ||
                           name.find("kv_a_proj_with_mqa") != std::string::npos ||
                           name.find("kv_b_proj") != std::string::npos;
    if (!is_latent || name.find("lora_A") == std::string::npos) continue;
    ++latent;
    // B starts at zero, so A's gradient is zero; B's gradient carries the signal
    const std::string b_name = name.substr(0, name.size() - 6) + "lora_B";
    for (auto& [other, tb] : params)
      if (other == b_name) {
        ASSERT_TRUE(tb.grad().defined()) << other;
        double norm = 0;
        for (float g : tb.grad().to_vector()) norm += double(g) * g;
        EXPECT_GT(norm, 0.0) << other;
      }
  }
  EXPECT_EQ(latent, 2 * 4);  // q_a, q_b, kv_a, kv_b on each of 2 layers
}

}  // namespace
}  // namespace glm4
