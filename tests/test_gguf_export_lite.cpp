// GGUF export of glm4_moe_lite as llama.cpp's deepseek2: keys, names, dims and values read back
// (the kv_b_proj split, rotate-half row order), biases refused, which adapters can stay adapters.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "export/gguf_export.h"
#include "export/gguf_lora_export.h"
#include "model/save.h"
#include "support/temp_dir.h"
#include "tests/support/expect_error.h"
#include "tests/support/gguf_reader.h"
#include "tests/support/random_values.h"

namespace glm4 {
namespace {

using glm4::testing::expect_error;
using glm4::testing::TempDir;
using Dims = std::vector<int64_t>;

std::string lite_dir(const std::string& name) {
  return std::string(GLM4_TEST_DATA) + "/moe_lite/" + name;
}

// Two layers (the first dense), q through a 32 bottleneck, kv_lora 64, heads of 32 + 16 / 32:
// rows of 32 or 64 values, so q8_0 applies to every matrix but the router.
std::unique_ptr<Glm4Model> qlora_model() {
  const nlohmann::json j = {{"architectures", {"Glm4MoeLiteForCausalLM"}},
                            {"model_type", "glm4_moe_lite"},
                            {"vocab_size", 64},
                            {"hidden_size", 64},
                            {"intermediate_size", 96},
                            {"moe_intermediate_size", 32},
                            {"num_hidden_layers", 2},
                            {"num_attention_heads", 2},
                            {"num_key_value_heads", 2},
                            {"q_lora_rank", 32},
                            {"kv_lora_rank", 64},
                            {"qk_nope_head_dim", 32},
                            {"qk_rope_head_dim", 16},
                            {"v_head_dim", 32},
                            {"rope_theta", 1e6},
                            {"rms_norm_eps", 1e-5},
                            {"attention_bias", false},
                            {"max_position_embeddings", 512},
                            {"n_routed_experts", 4},
                            {"n_shared_experts", 1},
                            {"num_experts_per_tok", 2},
                            {"n_group", 1},
                            {"topk_group", 1},
                            {"norm_topk_prob", true},
                            {"routed_scaling_factor", 1.8},
                            {"first_k_dense_replace", 1},
                            {"num_nextn_predict_layers", 1},
                            {"eos_token_id", {1}},
                            {"pad_token_id", 0}};
  auto model = std::make_unique<Glm4Model>(parse_model_config(j, "config.json"));
  init_random(*model, 7);
  return model;
}

std::map<std::string, std::vector<float>> ours(Glm4Model& m) {
  std::map<std::string, std::vector<float>> out;
  m.visit([&](const std::string& name, Param& p) {
    const Tensor t = p.to_f32();
    out[name] = std::vector<float>(t.data(), t.data() + t.numel());
  });
  return out;
}

TEST(GgufExportLite, QLoraModelKeysNamesDimsAndValues) {
  TempDir dir;
  auto model = qlora_model();
  const GgufExportResult r = export_gguf_model(*model, dir.path(), dir / "m.gguf", GgmlType::F32);
  EXPECT_EQ(r.arch, "deepseek2");
  auto f = GgufFile::open(dir / "m.gguf");
  std::set<std::string> names, want = {"token_embd.weight", "output_norm.weight", "output.weight"};
  for (const auto& t : f->tensors()) names.insert(t.name);
  for (int i = 0; i < 2; ++i) {
    std::vector<std::string> per = {
        "attn_norm.weight",     "attn_q_a.weight",       "attn_q_a_norm.weight", "attn_q_b.weight",
        "attn_kv_a_mqa.weight", "attn_kv_a_norm.weight", "attn_k_b.weight",      "attn_v_b.weight",
        "attn_output.weight",   "ffn_norm.weight"};
    if (i == 0) {
      per.insert(per.end(), {"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"});
    } else {
      per.insert(per.end(), {"ffn_gate_inp.weight", "exp_probs_b.bias", "ffn_gate_exps.weight",
                             "ffn_up_exps.weight", "ffn_down_exps.weight", "ffn_gate_shexp.weight",
                             "ffn_up_shexp.weight", "ffn_down_shexp.weight"});
    }
    for (const auto& n : per) want.insert("blk." + std::to_string(i) + "." + n);
  }
  EXPECT_EQ(names, want);
  // The dims llama.cpp's deepseek2 loader asks for.
  EXPECT_EQ(f->tensor("blk.0.attn_q_a.weight").ne, (Dims{64, 32}));
  EXPECT_EQ(f->tensor("blk.0.attn_q_b.weight").ne, (Dims{32, 2 * 48}));
  EXPECT_EQ(f->tensor("blk.0.attn_kv_a_mqa.weight").ne, (Dims{64, 64 + 16}));
  EXPECT_EQ(f->tensor("blk.0.attn_k_b.weight").ne, (Dims{32, 64, 2}));  // {nope, kv_lora, H}
  EXPECT_EQ(f->tensor("blk.0.attn_v_b.weight").ne, (Dims{64, 32, 2}));  // {kv_lora, v, H}
  EXPECT_EQ(f->tensor("blk.0.attn_output.weight").ne, (Dims{2 * 32, 64}));
  EXPECT_EQ(f->tensor("blk.1.ffn_down_exps.weight").ne, (Dims{32, 64, 4}));
  EXPECT_EQ(f->tensor("blk.1.ffn_gate_shexp.weight").ne, (Dims{64, 32}));
  const std::pair<const char*, uint32_t> u32s[] = {
      {"block_count", 2},
      {"context_length", 512},
      {"embedding_length", 64},
      {"feed_forward_length", 96},
      {"attention.head_count", 2},
      {"attention.head_count_kv", 1},
      {"attention.q_lora_rank", 32},
      {"attention.kv_lora_rank", 64},
      {"attention.key_length", 64 + 16},
      {"attention.value_length", 64},
      {"attention.key_length_mla", 48},
      {"attention.value_length_mla", 32},
      {"rope.dimension_count", 16},
      {"expert_count", 4},
      {"expert_used_count", 2},
      {"expert_group_count", 1},
      {"expert_group_used_count", 1},
      {"expert_feed_forward_length", 32},
      {"expert_shared_count", 1},
      {"leading_dense_block_count", 1},
      {"expert_gating_func", 2},  // sigmoid
      {"nextn_predict_layers", 0},
      {"vocab_size", 64},
  };
  for (const auto& [key, value] : u32s)
    EXPECT_EQ(f->get_u32(std::string("deepseek2.") + key), value) << key;
  EXPECT_EQ(f->get_f32("deepseek2.rope.freq_base"), 1e6f);
  EXPECT_EQ(f->get_f32("deepseek2.attention.layer_norm_rms_epsilon"), 1e-5f);
  EXPECT_EQ(f->get_f32("deepseek2.expert_weights_scale"), 1.8f);
  EXPECT_TRUE(f->at("deepseek2.expert_weights_norm", GgufType::Bool).b);
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "none");

  // Every value: one to one, the experts stacked, k_b / v_b from kv_b_proj's rows.
  const auto w = ours(*model);
  const std::string a = "model.layers.1.", b = "blk.1.";
  EXPECT_EQ(f->tensor("token_embd.weight").to_f32(), w.at("model.embed_tokens.weight"));
  EXPECT_EQ(f->tensor("output.weight").to_f32(), w.at("lm_head.weight"));
  const std::pair<const char*, const char*> one[] = {
      {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
      {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
      {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
      {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate.weight", "ffn_gate_inp.weight"},
      {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight"}};
  for (const auto& [src, dst] : one) EXPECT_EQ(f->tensor(b + dst).to_f32(), w.at(a + src)) << dst;
  const std::vector<float> up = f->tensor(b + "ffn_up_exps.weight").to_f32();
  const std::vector<float>& up2 = w.at(a + "mlp.experts.2.up_proj.weight");
  EXPECT_EQ(std::vector<float>(up.begin() + 2 * 32 * 64, up.begin() + 3 * 32 * 64), up2);
  for (int layer : {0, 1}) {
    const std::vector<float>& kvb =
        w.at("model.layers." + std::to_string(layer) + ".self_attn.kv_b_proj.weight");
    const std::string blk = "blk." + std::to_string(layer) + ".";
    const std::vector<float> kb = f->tensor(blk + "attn_k_b.weight").to_f32();
    const std::vector<float> vb = f->tensor(blk + "attn_v_b.weight").to_f32();
    ASSERT_EQ(kb.size(), size_t(2 * 64 * 32));
    ASSERT_EQ(vb.size(), size_t(2 * 32 * 64));
    // kv_b_proj rows per head: 32 key rows then 32 value rows, each of kv_lora 64 values.
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 64; ++l)
        for (int n = 0; n < 32; ++n) {
          ASSERT_EQ(kb[size_t((h * 64 + l) * 32 + n)], kvb[size_t((h * 64 + n) * 64 + l)]);
          ASSERT_EQ(vb[size_t((h * 32 + n) * 64 + l)], kvb[size_t((h * 64 + 32 + n) * 64 + l)]);
        }
  }
  bool mtp_note = false;
  for (const auto& n : r.notes) mtp_note |= n.find("MTP") != std::string::npos;
  EXPECT_TRUE(mtp_note);

  // q8_0: every matrix quantized (rows of 32 or 64), the norms and router f32.
  export_gguf_model(*model, dir.path(), dir / "q.gguf", GgmlType::Q8_0);
  auto q = GgufFile::open(dir / "q.gguf");
  for (const auto& t : q->tensors()) {
    const bool small = t.ne.size() == 1 || t.name.find("ffn_gate_inp") != std::string::npos;
    EXPECT_EQ(t.type, small ? GgmlType::F32 : GgmlType::Q8_0) << t.name;
  }
}

// tiny_lite_plain: q_proj (no q lora, written q_lora_rank 0), two dense layers, rotate-half RoPE:
// llama.cpp's deepseek2 rotates adjacent pairs, so each head's rope rows of attn_q and the rope
// rows of attn_kv_a_mqa come as (j, j + d/2) pairs; the nope and latent rows stay in place.
TEST(GgufExportLite, PlainFixtureQProjAndRotateHalfRowsAsPairs) {
  TempDir dir;
  auto model = load_model(lite_dir("tiny_lite_plain"));
  export_gguf_model(*model, lite_dir("tiny_lite_plain"), dir / "p.gguf", GgmlType::F32);
  auto f = GgufFile::open(dir / "p.gguf");
  EXPECT_EQ(f->get_u32("deepseek2.attention.q_lora_rank"), 0u);
  EXPECT_EQ(f->get_u32("deepseek2.leading_dense_block_count"), 2u);
  EXPECT_FALSE(f->at("deepseek2.expert_weights_norm", GgufType::Bool).b);
  EXPECT_EQ(f->get_f32("deepseek2.rope.freq_base"), 50000.0f);
  EXPECT_EQ(f->find_tensor("blk.0.attn_q_a.weight"), nullptr);
  EXPECT_EQ(f->tensor("blk.0.attn_q.weight").ne, (Dims{32, 4 * 12}));
  EXPECT_EQ(f->tensor("blk.2.ffn_up_exps.weight").ne, (Dims{32, 16, 16}));
  const auto w = ours(*model);
  const int64_t cols = 32, nope = 8, rope = 4;
  const std::vector<float> q = f->tensor("blk.1.attn_q.weight").to_f32();
  const std::vector<float>& q0 = w.at("model.layers.1.self_attn.q_proj.weight");
  auto row = [&](const std::vector<float>& m, int64_t r) {
    return std::vector<float>(m.begin() + r * cols, m.begin() + (r + 1) * cols);
  };
  for (int64_t h = 0; h < 4; ++h) {
    const int64_t base = h * (nope + rope);
    for (int64_t n = 0; n < nope; ++n) EXPECT_EQ(row(q, base + n), row(q0, base + n));
    for (int64_t j = 0; j < rope / 2; ++j) {
      EXPECT_EQ(row(q, base + nope + 2 * j), row(q0, base + nope + j)) << h << " " << j;
      EXPECT_EQ(row(q, base + nope + 2 * j + 1), row(q0, base + nope + rope / 2 + j));
    }
  }
  const std::vector<float> kv = f->tensor("blk.1.attn_kv_a_mqa.weight").to_f32();
  const std::vector<float>& kv0 = w.at("model.layers.1.self_attn.kv_a_proj_with_mqa.weight");
  for (int64_t l = 0; l < 16; ++l) EXPECT_EQ(row(kv, l), row(kv0, l));
  EXPECT_EQ(row(kv, 16), row(kv0, 16));
  EXPECT_EQ(row(kv, 17), row(kv0, 18));
  EXPECT_EQ(row(kv, 18), row(kv0, 17));
  EXPECT_EQ(row(kv, 19), row(kv0, 19));
}

TEST(GgufExportLite, AttentionBiasesAreRefused) {
  TempDir dir;
  auto model = load_model(lite_dir("tiny_lite"));  // attention_bias true
  expect_error(
      [&] { export_gguf_model(*model, lite_dir("tiny_lite"), dir / "x.gguf", GgmlType::F32); },
      "gguf export: llama.cpp's deepseek2 has no attention biases, so "
      "'model.layers.0.self_attn.q_a_proj.bias' (attention_bias true) cannot be exported");
  EXPECT_FALSE(std::filesystem::exists(dir / "x.gguf"));
}

GgufLoraModule random_module(const std::string& path, int64_t rank, int64_t in, int64_t out,
                             uint32_t seed) {
  return {path,
          rank,
          in,
          out,
          glm4::testing::randn(size_t(rank * in), 2 * seed),
          glm4::testing::randn(size_t(out * rank), 2 * seed + 1)};
}

// llama.cpp's deepseek2 graph applies adapters to attn_output and the MLPs (build_lora_mm /
// mul_mat_id) but multiplies q, kv_a and the k_b / v_b halves of kv_b_proj with plain
// ggml_mul_mat: those are refused naming the module, the rest written as for glm4moe.
TEST(GgufLoraExportLite, OutputAndMlpAdaptersWrittenLatentProjectionsRefused) {
  TempDir dir;
  const ModelConfig c = load_model_config(lite_dir("tiny_lite"));  // 4 heads, v 10, hidden 32
  const std::vector<GgufLoraModule> mods = {
      random_module("model.layers.1.self_attn.o_proj", 4, 40, 32, 1),
      random_module("model.layers.0.mlp.gate_proj", 4, 32, 64, 2),
      random_module("model.layers.1.mlp.shared_experts.down_proj", 4, 16, 32, 3),
      random_module("model.layers.2.mlp.experts.5.up_proj", 4, 32, 16, 4)};
  const auto r = export_gguf_lora(c, mods, 2.0, "ad", dir / "l.gguf", GgmlType::F32);
  auto f = GgufFile::open(dir / "l.gguf");
  EXPECT_EQ(f->get_string("general.architecture"), "deepseek2");
  EXPECT_EQ(f->tensor("blk.1.attn_output.weight.lora_a").ne, (Dims{40, 4}));
  EXPECT_EQ(f->tensor("blk.1.attn_output.weight.lora_b").ne, (Dims{4, 32}));
  EXPECT_EQ(f->tensor("blk.1.attn_output.weight.lora_a").to_f32(), mods[0].a);
  EXPECT_EQ(f->tensor("blk.0.ffn_gate.weight.lora_b").ne, (Dims{4, 64}));
  EXPECT_EQ(f->tensor("blk.1.ffn_down_shexp.weight.lora_a").ne, (Dims{16, 4}));
  EXPECT_EQ(f->tensor("blk.2.ffn_up_exps.weight.lora_a").ne, (Dims{32, 4, 16}));
  EXPECT_EQ(r.tensors, 8);
  for (const char* p : {"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"}) {
    const GgufLoraModule m =
        random_module(std::string("model.layers.0.self_attn.") + p, 4, 32, 32, 5);
    expect_error(
        [&] {
          export_gguf_lora(c, {mods[0], m}, 2.0, "ad", dir / "x.gguf", GgmlType::F32);
        },
        std::string("gguf-lora export: llama.cpp's deepseek2 (glm4_moe_lite) applies no LoRA to ") +
            p + " ('model.layers.0.self_attn." + p + "')");
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "x.gguf"));
}

}  // namespace
}  // namespace glm4
