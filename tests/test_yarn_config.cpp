// YaRN in config.json (rope_scaling of transformers 4, rope_parameters of transformers 5): what
// is read, the errors naming the field, the other scaling types still refused, the settings
// written back.
#include <gtest/gtest.h>

#include "base/check.h"
#include "model/config.h"
#include "tests/support/expect_error.h"
#include "tests/support/small_config.h"

namespace glm4 {
namespace {

using json = nlohmann::json;
using glm4::testing::error_of;

// A context of 8192, so that a factor can come from max_position_embeddings.
json small_glm4() {
  json j = testing::small_glm4_config();
  j["max_position_embeddings"] = 8192;
  return j;
}

std::string parse_error(const json& j) {
  return error_of([&] { parse_model_config(j, "config.json"); });
}

std::string yarn_dir(const std::string& name) {
  return std::string(GLM4_TEST_DATA) + "/yarn/" + name;
}

TEST(YarnConfig, ReadFromRopeScalingOrRopeParameters) {
  json j = small_glm4();
  j["rope_scaling"] = {
      {"type", "yarn"},          {"factor", 4},       {"beta_fast", 16},
      {"beta_slow", 2.5},        {"mscale", 0.7},     {"mscale_all_dim", 0.5},
      {"attention_factor", 1.2}, {"truncate", false}, {"original_max_position_embeddings", 2048}};
  const ModelConfig c = parse_model_config(j, "config.json");
  ASSERT_TRUE(c.rope_scaling);
  const RopeScaling& y = *c.rope_scaling;
  EXPECT_EQ(y.factor, 4.0);
  EXPECT_EQ(y.original_max_position_embeddings, 2048);
  EXPECT_EQ(y.beta_fast, 16.0);
  EXPECT_EQ(y.beta_slow, 2.5);
  EXPECT_EQ(y.mscale, 0.7);
  EXPECT_EQ(y.mscale_all_dim, 0.5);
  EXPECT_EQ(y.attention_factor, 1.2);
  EXPECT_EQ(y.truncate, false);
  // transformers 5: inside rope_parameters, beside rope_theta; unset fields stay unset
  json t5 = small_glm4();
  t5["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 500.0}, {"factor", 2.0}};
  const ModelConfig c5 = parse_model_config(t5, "config.json");
  EXPECT_EQ(c5.rope_theta, 500.0);
  ASSERT_TRUE(c5.rope_scaling);
  EXPECT_EQ(c5.rope_scaling->factor, 2.0);
  EXPECT_FALSE(c5.rope_scaling->original_max_position_embeddings);
  EXPECT_FALSE(c5.rope_scaling->beta_fast);
  EXPECT_FALSE(c5.rope_scaling->truncate);
  // no factor: the ratio of the context lengths, as transformers 5 computes it
  t5["rope_parameters"] = {{"rope_type", "yarn"}, {"original_max_position_embeddings", 2048}};
  EXPECT_EQ(parse_model_config(t5, "config.json").rope_scaling->factor, 4.0);
  // the default RoPE, spelled out or null, sets nothing
  t5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500.0}};
  EXPECT_FALSE(parse_model_config(t5, "config.json").rope_scaling);
  j["rope_scaling"] = nullptr;
  EXPECT_FALSE(parse_model_config(j, "config.json").rope_scaling);
}

TEST(YarnConfig, ErrorsNameTheField) {
  auto with = [](json scaling) {
    json j = small_glm4();
    j["rope_scaling"] = std::move(scaling);
    return parse_error(j);
  };
  EXPECT_NE(with({{"type", "yarn"}, {"factor", 0}})
                .find(R"(config.json: field "rope_scaling.factor" (0) must be positive)"),
            std::string::npos);
  EXPECT_NE(with({{"type", "yarn"}, {"factor", -2.5}}).find(R"("rope_scaling.factor" (-2.5))"),
            std::string::npos);
  EXPECT_NE(with({{"type", "yarn"}, {"factor", "4"}})
                .find(R"(field "rope_scaling.factor" must be a number, got string "4")"),
            std::string::npos);
  EXPECT_NE(with({{"type", "yarn"}, {"factor", 4}, {"beta_fast", "32"}})
                .find(R"(field "rope_scaling.beta_fast" must be a number, got string "32")"),
            std::string::npos);
  EXPECT_NE(with({{"type", "yarn"}, {"factor", 4}, {"beta_slow", true}})
                .find(R"(field "rope_scaling.beta_slow" must be a number)"),
            std::string::npos);
  EXPECT_NE(with({{"type", "yarn"}, {"factor", 4}, {"truncate", 1}})
                .find(R"(field "rope_scaling.truncate" must be true or false, got number 1)"),
            std::string::npos);
  EXPECT_NE(with({{"type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", 0}})
                .find(R"("rope_scaling.original_max_position_embeddings" (0) must be positive)"),
            std::string::npos);
  EXPECT_NE(with({{"type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", 1.5}})
                .find(R"("rope_scaling.original_max_position_embeddings" must be an integer)"),
            std::string::npos);
  EXPECT_NE(with({{"type", "yarn"}, {"factor", 4}, {"attention_factor", 0}})
                .find(R"("rope_scaling.attention_factor" (0) must be positive)"),
            std::string::npos);
  EXPECT_NE(
      with({{"type", "yarn"}}).find(R"(field "rope_scaling" of RoPE type "yarn" needs "factor")"),
      std::string::npos);
  // two places that disagree
  json j = small_glm4();
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4}};
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 8}};
  EXPECT_NE(parse_error(j).find(
                R"(fields "rope_parameters" and "rope_scaling" give different YaRN settings)"),
            std::string::npos);
}

TEST(YarnConfig, OtherScalingTypesStayRefused) {
  for (const char* type : {"linear", "dynamic", "longrope", "llama3"}) {
    json j = small_glm4();
    j["rope_scaling"] = {{"rope_type", type}, {"factor", 4}};
    EXPECT_NE(parse_error(j).find(str_cat("field \"rope_scaling\" asks for RoPE type \"", type,
                                          "\"; supported: \"default\" and \"yarn\"")),
              std::string::npos)
        << type;
  }
}

// Written back as rope_scaling (both transformers generations read it) with the fields the file
// gave and the resolved factor; read back equal. Without YaRN no rope_scaling is written.
TEST(YarnConfig, RoundTripsThroughToHfJson) {
  for (const char* name : {"tiny_glm4_yarn", "tiny_lite_yarn"}) {
    const ModelConfig c = load_model_config(yarn_dir(name));
    ASSERT_TRUE(c.rope_scaling) << name;
    const json out = to_hf_json(c);
    ASSERT_TRUE(out.contains("rope_scaling")) << name;
    EXPECT_EQ(out["rope_scaling"]["rope_type"], "yarn");
    EXPECT_FALSE(out.contains("rope_parameters"));
    EXPECT_EQ(parse_model_config(out, "written"), c) << name;
  }
  json t5 = small_glm4();
  t5["rope_parameters"] = {{"rope_type", "yarn"}, {"original_max_position_embeddings", 2048}};
  const json out = to_hf_json(parse_model_config(t5, "config.json"));
  EXPECT_EQ(
      out["rope_scaling"],
      json({{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 2048}}));
  EXPECT_FALSE(to_hf_json(parse_model_config(small_glm4(), "c")).contains("rope_scaling"));
  // equality sees the scaling
  ModelConfig a = parse_model_config(t5, "c"), b = a;
  b.rope_scaling->beta_fast = 32.0;
  EXPECT_FALSE(a == b);
}

}  // namespace
}  // namespace glm4
