// glm4_moe configs (GLM-4.5 / 4.6 / 4.7): the fixtures' transformers 4.x and 5 files, the class
// defaults, the real-shape configs in configs/, errors naming the field, and writing back.
#include <gtest/gtest.h>

#include <filesystem>

#include "model/config.h"
#include "tests/support/expect_error.h"

namespace glm4 {
namespace {

using json = nlohmann::json;
using Family = ModelConfig::Family;
using testing::error_of;

ModelConfig fixture_config(const std::string& name) {
  return load_model_config(std::string(GLM4_TEST_DATA) + "/moe/" + name);
}

json minimal() {
  return json::parse(R"({"model_type": "glm4_moe", "vocab_size": 256, "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
    "n_routed_experts": 16, "num_experts_per_tok": 4, "moe_intermediate_size": 16})");
}

std::string parse_error(const json& j) {
  return error_of([&] { parse_model_config(j, "config.json"); });
}

TEST(MoeConfig, ReadsTheTransformers4Fixture) {
  const ModelConfig c = fixture_config("tiny_moe");
  EXPECT_EQ(c.family, Family::Glm4Moe);
  EXPECT_EQ(c.model_type, "glm4_moe");
  EXPECT_EQ(c.rope_style, RopeStyle::RotateHalf);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rotary_dim, 8);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_TRUE(c.use_qk_norm);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.post_norms);
  EXPECT_EQ(c.n_routed_experts, 16);
  EXPECT_EQ(c.num_experts_per_tok, 4);
  EXPECT_EQ(c.moe_intermediate_size, 16);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.n_group, 4);
  EXPECT_EQ(c.topk_group, 2);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.routed_scaling_factor, 2.5);
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{253, 254, 255}));
  EXPECT_FALSE(is_moe_layer(c, 0));
  EXPECT_TRUE(is_moe_layer(c, 1));
}

// transformers 5 writes rope settings under rope_parameters and the dtype as "dtype".
TEST(MoeConfig, ReadsTheTransformers5Fixture) {
  const ModelConfig c = fixture_config("tiny_moe_plain");
  EXPECT_EQ(c.rope_theta, 5e4);
  EXPECT_EQ(c.rotary_dim, 12);  // int(16 * 0.75)
  EXPECT_FALSE(c.use_qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_EQ(c.n_shared_experts, 2);
  EXPECT_EQ(c.first_k_dense_replace, 2);
  EXPECT_EQ(c.routed_scaling_factor, 1.5);
}

// Glm4MoeConfig's defaults: head_dim hidden / heads, 8 kv heads, eps 1e-5, no bias, one group,
// one shared expert, norm_topk_prob, scaling 1, one dense layer, partial rotary 0.5, no eos.
TEST(MoeConfig, MissingFieldsTakeGlm4MoeConfigDefaults) {
  json j = minimal();
  j["num_attention_heads"] = 8;
  j["num_key_value_heads"] = 8;
  const ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.rotary_dim, 2);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.use_qk_norm);
  EXPECT_EQ(c.n_group, 1);
  EXPECT_EQ(c.topk_group, 1);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.routed_scaling_factor, 1.0);
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_EQ(c.num_nextn_predict_layers, 0);
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_FALSE(c.pad_token_id.has_value());
  json k = minimal();
  k.erase("num_key_value_heads");
  k["num_attention_heads"] = 8;
  EXPECT_EQ(parse_model_config(k, "config.json").num_key_value_heads, 8);
}

TEST(MoeConfig, ErrorsNameTheField) {
  auto with = [](const char* key, json v) {
    json j = minimal();
    j[key] = std::move(v);
    return parse_error(j);
  };
  EXPECT_NE(with("n_group", 3).find(R"(field "n_group" (3) must divide "n_routed_experts" (16))"),
            std::string::npos);
  EXPECT_NE(with("n_group", 16).find(R"(field "n_group" (16) leaves 1 expert per group)"),
            std::string::npos);
  {
    json j = minimal();
    j["n_group"] = 4;
    j["topk_group"] = 5;
    EXPECT_NE(parse_error(j).find(R"(field "topk_group" (5) exceeds "n_group" (4))"),
              std::string::npos);
    j["topk_group"] = 1;
    j["num_experts_per_tok"] = 5;
    EXPECT_NE(
        parse_error(j).find(
            R"(field "num_experts_per_tok" (5) exceeds the 4 experts of the "topk_group" (1) groups kept)"),
        std::string::npos);
  }
  EXPECT_NE(
      with("num_experts_per_tok", 0).find(R"(field "num_experts_per_tok" (0) must be positive)"),
      std::string::npos);
  EXPECT_NE(
      with("first_k_dense_replace", 4)
          .find(R"(field "first_k_dense_replace" (4) must be in [0, "num_hidden_layers" (3)])"),
      std::string::npos);
  EXPECT_NE(with("routed_scaling_factor", -1.0)
                .find(R"(field "routed_scaling_factor" (-1) must be positive)"),
            std::string::npos);
  EXPECT_NE(with("scoring_func", "softmax").find(R"(field "scoring_func" is "softmax")"),
            std::string::npos);
  EXPECT_NE(with("use_qk_norm", 1).find(R"(field "use_qk_norm" must be true or false)"),
            std::string::npos);
  for (const char* key : {"n_routed_experts", "num_experts_per_tok", "moe_intermediate_size"}) {
    json j = minimal();
    j.erase(key);
    EXPECT_NE(parse_error(j).find(std::string("missing required field \"") + key + "\""),
              std::string::npos)
        << key;
  }
  json odd = minimal();
  odd["partial_rotary_factor"] = 0.25;
  odd["head_dim"] = 6;  // int(6 * 0.25) = 1
  EXPECT_NE(parse_error(odd).find("must be even"), std::string::npos);
}

// Writing back uses glm4_moe's own field names and reads back as the same config.
TEST(MoeConfig, RoundTripsThroughToHfJson) {
  for (const char* name : {"tiny_moe", "tiny_moe_plain", "tiny_moe_mlx"}) {
    const ModelConfig c = fixture_config(name);
    const json j = to_hf_json(c);
    EXPECT_EQ(j["architectures"], json::array({"Glm4MoeForCausalLM"})) << name;
    EXPECT_EQ(j["model_type"], "glm4_moe");
    for (const char* key :
         {"n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts",
          "n_group", "topk_group", "norm_topk_prob", "routed_scaling_factor",
          "first_k_dense_replace", "num_nextn_predict_layers", "use_qk_norm",
          "partial_rotary_factor", "rope_theta", "head_dim"})
      EXPECT_TRUE(j.contains(key)) << name << " " << key;
    EXPECT_FALSE(j.contains("rope_parameters"));
    EXPECT_EQ(parse_model_config(j, "written"), c) << name;
  }
}

TEST(MoeConfig, RealShapesLoad) {
  struct Shape {
    const char* file;
    int64_t layers, experts, hidden, dense;
    bool qk_norm;
    double scaling;
  };
  for (const Shape& s : {Shape{"glm-4.5-air.json", 46, 128, 4096, 1, false, 1.0},
                         Shape{"glm-4.5.json", 92, 160, 5120, 3, true, 2.5},
                         Shape{"glm-4.6.json", 92, 160, 5120, 3, true, 2.5},
                         Shape{"glm-4.7.json", 92, 160, 5120, 3, true, 2.5},
                         Shape{"moe-mid.json", 8, 32, 1024, 1, false, 1.0}}) {
    const ModelConfig c =
        load_model_config(std::filesystem::path(GLM4_SOURCE_DIR) / "configs" / s.file);
    EXPECT_EQ(c.family, Family::Glm4Moe) << s.file;
    EXPECT_EQ(c.num_hidden_layers, s.layers) << s.file;
    EXPECT_EQ(c.n_routed_experts, s.experts) << s.file;
    EXPECT_EQ(c.hidden_size, s.hidden) << s.file;
    EXPECT_EQ(c.first_k_dense_replace, s.dense) << s.file;
    EXPECT_EQ(c.use_qk_norm, s.qk_norm) << s.file;
    EXPECT_EQ(c.routed_scaling_factor, s.scaling) << s.file;
    EXPECT_EQ(c.rotary_dim, c.head_dim / 2) << s.file;
  }
}

// The dense families keep their own RoPE pairs and cannot carry expert fields.
TEST(MoeConfig, DenseFamiliesRejectMoeSettings) {
  ModelConfig c = fixture_config("tiny_moe");
  c.family = Family::Glm4;
  c.model_type = "glm4";
  c.post_norms = true;
  EXPECT_NE(
      error_of([&] { validate_model_config(c, "cfg"); }).find("rotates RoPE pairs (2i, 2i + 1)"),
      std::string::npos);
  c.rope_style = RopeStyle::Interleaved;
  EXPECT_NE(error_of([&] {
              validate_model_config(c, "cfg");
            }).find("experts and q/k norms belong to glm4_moe"),
            std::string::npos);
}

}  // namespace
}  // namespace glm4
