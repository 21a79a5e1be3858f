// glm4_moe_lite configs (GLM-4.7-Flash): the real shape in configs/, Glm4MoeLiteConfig's defaults,
// mlp_layer_types, errors naming the field, and writing back.
#include <gtest/gtest.h>

#include <filesystem>

#include "model/config.h"
#include "tests/support/expect_error.h"

namespace glm4 {
namespace {

using json = nlohmann::json;
using Family = ModelConfig::Family;
using testing::error_of;

json minimal() {
  return json::parse(R"({"model_type": "glm4_moe_lite", "vocab_size": 256, "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
    "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
    "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
    "v_head_dim": 12})");
}

std::string parse_error(const json& j) {
  return error_of([&] { parse_model_config(j, "config.json"); });
}

ModelConfig config_file(const char* name) {
  return load_model_config(std::filesystem::path(GLM4_SOURCE_DIR) / "configs" / name);
}

TEST(MoeLiteConfig, ReadsGlm47Flash) {
  const ModelConfig c = config_file("glm-4.7-flash.json");
  EXPECT_EQ(c.family, Family::Glm4MoeLite);
  EXPECT_EQ(c.model_type, "glm4_moe_lite");
  EXPECT_TRUE(is_moe_family(c));
  EXPECT_TRUE(has_latent_attention(c));
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_hidden_layers, 47);
  EXPECT_EQ(c.num_attention_heads, 20);
  EXPECT_EQ(c.num_key_value_heads, 20);
  EXPECT_EQ(c.q_lora_rank, 768);
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.qk_nope_head_dim, 192);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.v_head_dim, 256);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.rotary_dim, 64);
  EXPECT_EQ(c.rope_style, RopeStyle::Interleaved);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.use_qk_norm);
  EXPECT_EQ(c.n_routed_experts, 64);
  EXPECT_EQ(c.num_experts_per_tok, 4);
  EXPECT_EQ(c.moe_intermediate_size, 1536);
  EXPECT_EQ(c.routed_scaling_factor, 1.8);
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.vocab_size, 154880);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{154820, 154827, 154829}));
  EXPECT_FALSE(is_moe_layer(c, 0));
  EXPECT_TRUE(is_moe_layer(c, 1));
  EXPECT_TRUE(is_moe_layer(c, 46));

  const ModelConfig mid = config_file("moe-lite-mid.json");
  EXPECT_EQ(mid.family, Family::Glm4MoeLite);
  EXPECT_EQ(mid.head_dim, 128);
  EXPECT_EQ(mid.q_lora_rank, 384);
}

// Glm4MoeLiteConfig's defaults: GLM-4.7-Flash's latent sizes, kv heads = heads, interleaved RoPE
// on the whole rotary part, one dense layer; q_lora_rank null means one q_proj.
TEST(MoeLiteConfig, MissingFieldsTakeGlm4MoeLiteConfigDefaults) {
  json j = minimal();
  for (const char* key : {"kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"})
    j.erase(key);
  j["q_lora_rank"] = nullptr;
  const ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.q_lora_rank, 0);
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.qk_nope_head_dim, 192);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.v_head_dim, 256);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.rope_style, RopeStyle::Interleaved);
  EXPECT_EQ(c.rotary_dim, 64);
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  json r = minimal();
  r["rope_interleave"] = false;
  EXPECT_EQ(parse_model_config(r, "config.json").rope_style, RopeStyle::RotateHalf);
}

TEST(MoeLiteConfig, ReadsMlpLayerTypes) {
  json j = minimal();
  j["mlp_layer_types"] = {"dense", "dense", "sparse"};
  EXPECT_EQ(parse_model_config(j, "config.json").first_k_dense_replace, 2);
  j["mlp_layer_types"] = {"dense", "sparse", "dense"};
  EXPECT_NE(parse_error(j).find(R"(field "mlp_layer_types": dense layer 2 after a sparse one)"),
            std::string::npos);
  j["mlp_layer_types"] = {"dense", "sparse"};
  EXPECT_NE(parse_error(j).find(R"(field "mlp_layer_types" has 2 entries)"), std::string::npos);
  j["mlp_layer_types"] = {"dense", "sparse", "moe"};
  EXPECT_NE(parse_error(j).find(R"(field "mlp_layer_types[2]" must be "dense" or "sparse")"),
            std::string::npos);
  j["mlp_layer_types"] = {"dense", "sparse", "sparse"};
  j["first_k_dense_replace"] = 2;
  EXPECT_NE(parse_error(j).find(R"(field "first_k_dense_replace" (2) disagrees with the 1 dense)"),
            std::string::npos);
}

TEST(MoeLiteConfig, ErrorsNameTheField) {
  auto with = [](const char* key, json v) {
    json j = minimal();
    j[key] = std::move(v);
    return parse_error(j);
  };
  EXPECT_NE(with("kv_lora_rank", 0).find(R"(field "kv_lora_rank" (0) must be positive)"),
            std::string::npos);
  EXPECT_NE(with("q_lora_rank", -1).find(R"(field "q_lora_rank" (-1) must be positive or null)"),
            std::string::npos);
  EXPECT_NE(with("v_head_dim", 0).find(R"(field "v_head_dim" (0) must be positive)"),
            std::string::npos);
  EXPECT_NE(
      with("partial_rotary_factor", 0.5).find(R"(field "partial_rotary_factor" (0.5) must be 1)"),
      std::string::npos);
  EXPECT_NE(with("num_key_value_heads", 2)
                .find(R"(field "num_key_value_heads" (2) must equal "num_attention_heads" (4))"),
            std::string::npos);
  EXPECT_NE(with("use_qk_norm", true).find(R"(field "use_qk_norm" is true)"), std::string::npos);
  EXPECT_NE(with("topk_method", "greedy").find(R"(field "topk_method" is "greedy"; glm4_moe_lite)"),
            std::string::npos);
  EXPECT_NE(with("rope_scaling", json{{"rope_type", "dynamic"}, {"factor", 4.0}})
                .find(R"(asks for RoPE type "dynamic")"),
            std::string::npos);
}

// Written back with glm4_moe_lite's own names (no head_dim: transformers reads it as
// qk_rope_head_dim) and read back as the same config.
TEST(MoeLiteConfig, RoundTripsThroughToHfJson) {
  json nulled = minimal();
  nulled["q_lora_rank"] = nullptr;
  nulled["rope_interleave"] = false;
  for (const ModelConfig& c :
       {config_file("glm-4.7-flash.json"), parse_model_config(nulled, "config.json")}) {
    const json j = to_hf_json(c);
    EXPECT_EQ(j["architectures"], json::array({"Glm4MoeLiteForCausalLM"}));
    EXPECT_EQ(j["model_type"], "glm4_moe_lite");
    EXPECT_FALSE(j.contains("head_dim"));
    EXPECT_FALSE(j.contains("use_qk_norm"));
    EXPECT_EQ(j["partial_rotary_factor"], 1.0);
    EXPECT_EQ(j["q_lora_rank"], c.q_lora_rank > 0 ? json(c.q_lora_rank) : json(nullptr));
    EXPECT_EQ(j["rope_interleave"], c.rope_style == RopeStyle::Interleaved);
    EXPECT_EQ(parse_model_config(j, "written"), c);
  }
}

TEST(MoeLiteConfig, OtherFamiliesRejectLatentSizes) {
  ModelConfig c = config_file("moe-mid.json");
  c.kv_lora_rank = 16;
  EXPECT_NE(error_of([&] {
              validate_model_config(c, "cfg");
            }).find("latent attention sizes belong to glm4_moe_lite, not the glm4_moe family"),
            std::string::npos);
}

}  // namespace
}  // namespace glm4
