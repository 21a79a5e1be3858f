// Every config.json rejection names the file and the field at fault, with the values involved.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/check.h"
#include "model/config.h"
#include "tests/support/expect_error.h"
#include "tests/support/small_config.h"

namespace glm4 {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using glm4::testing::error_of;

json small_glm4() { return testing::small_glm4_config(); }

json chatglm3() {
  std::ifstream in(fs::path(GLM4_TEST_DATA) / "hf_configs" / "chatglm3-6b.json");
  return json::parse(in);
}

std::string parse_error(const json& j) {
  return error_of([&] { parse_model_config(j, "config.json"); });
}

void expect_contains(const std::string& text, const std::string& part, int line) {
  EXPECT_NE(text.find(part), std::string::npos)
      << "line " << line << ": \"" << text << "\"\n  lacks \"" << part << "\"";
}
#define EXPECT_CONTAINS(text, part) expect_contains((text), (part), __LINE__)

TEST(ConfigErrors, KvHeadsMustDivideHeads) {
  json j = small_glm4();
  j["num_attention_heads"] = 32;
  j["num_key_value_heads"] = 3;
  EXPECT_CONTAINS(
      parse_error(j),
      R"(config.json: field "num_key_value_heads" (3) must divide "num_attention_heads" (32))");
  json c = chatglm3();
  c["multi_query_group_num"] = 5;
  EXPECT_CONTAINS(parse_error(c),
                  R"(field "multi_query_group_num" (5) must divide "num_attention_heads" (32))");
}

TEST(ConfigErrors, MissingRequiredFields) {
  for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads"}) {
    json j = small_glm4();
    j.erase(key);
    EXPECT_CONTAINS(parse_error(j),
                    std::string("config.json: missing required field \"") + key + "\"");
  }
  for (const char* key : {"padded_vocab_size", "ffn_hidden_size", "num_layers", "hidden_size"}) {
    json j = chatglm3();
    j.erase(key);
    EXPECT_CONTAINS(parse_error(j),
                    std::string("config.json: missing required field \"") + key + "\"");
  }
}

TEST(ConfigErrors, WrongJsonTypes) {
  json j = small_glm4();
  j["hidden_size"] = "64";
  EXPECT_CONTAINS(parse_error(j),
                  R"(config.json: field "hidden_size" must be an integer, got string "64")");
  j = small_glm4();
  j["hidden_size"] = 64.5;
  EXPECT_CONTAINS(parse_error(j), R"(field "hidden_size" must be an integer, got number 64.5)");
  j = small_glm4();
  j["num_hidden_layers"] = true;
  EXPECT_CONTAINS(parse_error(j),
                  R"(field "num_hidden_layers" must be an integer, got boolean true)");
  j = small_glm4();
  j["head_dim"] = nullptr;
  EXPECT_CONTAINS(parse_error(j), R"(field "head_dim" must be an integer, got null)");
  j = small_glm4();
  j["rms_norm_eps"] = "1e-5";
  EXPECT_CONTAINS(parse_error(j), R"(field "rms_norm_eps" must be a number, got string "1e-5")");
  j = small_glm4();
  j["attention_bias"] = 1;
  EXPECT_CONTAINS(parse_error(j), R"(field "attention_bias" must be true or false, got number 1)");
  j = small_glm4();
  j["eos_token_id"] = "3";
  EXPECT_CONTAINS(parse_error(j),
                  R"(field "eos_token_id" must be an integer or a list of integers)");
  j = small_glm4();
  j["eos_token_id"] = json::array({1, 2.5});
  EXPECT_CONTAINS(parse_error(j),
                  R"(field "eos_token_id" must be an integer or a list of integers)");
  j = small_glm4();
  j["torch_dtype"] = "float8_e4m3fn";
  EXPECT_CONTAINS(
      parse_error(j),
      R"(field "torch_dtype" is "float8_e4m3fn"; supported: "float32", "bfloat16", "float16")");
  j = small_glm4();
  j["model_type"] = 4;
  EXPECT_CONTAINS(parse_error(j), R"(field "model_type" must be a string, got number 4)");
  j = small_glm4();
  j["vocab_size"] = json::parse("18446744073709551615");
  EXPECT_CONTAINS(parse_error(j), R"(field "vocab_size" must be a 64-bit integer)");
}

TEST(ConfigErrors, NonPositiveAndHugeSizes) {
  for (const char* key :
       {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings"}) {
    json j = small_glm4();
    j[key] = key == std::string("head_dim") ? 0 : -4;
    std::string value = key == std::string("head_dim") ? "0" : "-4";
    EXPECT_CONTAINS(parse_error(j), std::string("config.json: field \"") + key + "\" (" + value +
                                        ") must be positive");
  }
  json j = small_glm4();
  j["vocab_size"] = int64_t(1) << 40;
  EXPECT_CONTAINS(parse_error(j),
                  R"(field "vocab_size" (1099511627776) must be at most 2147483647)");
  j = small_glm4();
  j["head_dim"] = int64_t(1) << 62;
  EXPECT_CONTAINS(parse_error(j),
                  R"(field "head_dim" (4611686018427387904) must be at most 2147483647)");
  json c = chatglm3();
  c["kv_channels"] = 0;
  EXPECT_CONTAINS(parse_error(c), R"(field "kv_channels" (0) must be positive)");
}

TEST(ConfigErrors, HiddenNotDivisibleWhenHeadDimIsDerived) {
  json c = chatglm3();
  c["kv_channels"] = nullptr;
  c["hidden_size"] = 4001;
  EXPECT_CONTAINS(
      parse_error(c),
      R"(field "hidden_size" (4001) must be divisible by "num_attention_heads" (32) when "kv_channels" is null)");
  json j = small_glm4();
  j["head_dim"] = 24;  // heads * head_dim != hidden is allowed for glm4
  j["partial_rotary_factor"] = 0.5;
  EXPECT_EQ(parse_model_config(j, "config.json").head_dim, 24);
}

TEST(ConfigErrors, RotaryDims) {
  json j = small_glm4();
  j["head_dim"] = 126;  // int(126 * 0.5) = 63
  EXPECT_CONTAINS(
      parse_error(j),
      R"(config.json: rotary dimension 63 (int("head_dim" * "partial_rotary_factor"), head_dim 126) must be even)");
  j = small_glm4();
  j["partial_rotary_factor"] = 1.5;
  EXPECT_CONTAINS(parse_error(j),
                  R"(config.json: field "partial_rotary_factor" (1.5) must be in (0, 1])");
  j = small_glm4();
  j["partial_rotary_factor"] = 0.05;  // int(0.8) = 0
  EXPECT_CONTAINS(parse_error(j), "config.json: rotary dimension 0");
  EXPECT_CONTAINS(parse_error(j), "must be positive");
  json c = chatglm3();
  c["kv_channels"] = 6;  // 6 / 2 = 3
  EXPECT_CONTAINS(parse_error(c),
                  R"(rotary dimension 3 ("kv_channels" / 2, kv_channels 6) must be even)");
  // Only a hand-built config can ask for more rotary dims than the head has.
  ModelConfig m = parse_model_config(small_glm4(), "config.json");
  m.rotary_dim = 18;
  EXPECT_CONTAINS(
      error_of([&] { validate_model_config(m, "mine"); }),
      R"(mine: rotary dimension 18 (int("head_dim" * "partial_rotary_factor")) exceeds "head_dim" (16))");
}

TEST(ConfigErrors, EpsAndTheta) {
  for (double eps : {0.0, -1e-5, 1.0, 2.0}) {
    json j = small_glm4();
    j["rms_norm_eps"] = eps;
    EXPECT_CONTAINS(parse_error(j), "config.json: field \"rms_norm_eps\" (");
    EXPECT_CONTAINS(parse_error(j), ") must be in (0, 1)");
  }
  json c = chatglm3();
  c["layernorm_epsilon"] = 0.0;
  EXPECT_CONTAINS(parse_error(c),
                  R"(config.json: field "layernorm_epsilon" (0) must be in (0, 1))");
  json j = small_glm4();
  j["rope_theta"] = -10.0;
  EXPECT_CONTAINS(parse_error(j), R"(config.json: field "rope_theta" (-10) must be positive)");
  c = chatglm3();
  c["rope_ratio"] = 0;
  EXPECT_CONTAINS(parse_error(c), R"(config.json: field "rope_ratio" (0) must be positive)");
}

TEST(ConfigErrors, RopeParametersConflictsAndScaling) {
  json j = small_glm4();
  j["rope_theta"] = 10000.0;
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500.0}};
  EXPECT_CONTAINS(
      parse_error(j),
      R"(config.json: field "rope_theta" (10000) disagrees with "rope_parameters.rope_theta" (500))");
  j = small_glm4();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  EXPECT_CONTAINS(
      parse_error(j),
      R"(config.json: field "rope_scaling" asks for RoPE type "linear"; supported: "default" and "yarn")");
  j = small_glm4();
  j["rope_parameters"] = "default";
  EXPECT_CONTAINS(parse_error(j),
                  R"(field "rope_parameters" must be an object, got string "default")");
}

TEST(ConfigErrors, FamilyDetection) {
  json j = small_glm4();
  j.erase("architectures");
  j["model_type"] = "llama";
  std::string e = parse_error(j);
  EXPECT_CONTAINS(e, R"(config.json: unsupported model_type "llama")");
  EXPECT_CONTAINS(
      e,
      R"("glm4" (Glm4ForCausalLM), "glm" (GlmForCausalLM), "chatglm" (ChatGLMModel, ChatGLMForConditionalGeneration))");
  j["architectures"] = json::array({"LlamaForCausalLM"});
  EXPECT_CONTAINS(parse_error(j),
                  R"(unsupported model_type "llama", architectures array ["LlamaForCausalLM"])");
  j.erase("model_type");
  j.erase("architectures");
  EXPECT_CONTAINS(
      parse_error(j),
      R"(config.json: no "model_type" or known "architectures" to tell the model family)");
  j["architectures"] = "Glm4ForCausalLM";
  EXPECT_CONTAINS(parse_error(j), R"(field "architectures" must be a list of strings)");
  EXPECT_CONTAINS(parse_error(json::array({1, 2})),
                  "config.json: expected a JSON object at the top level, got array");
}

TEST(ConfigErrors, UnsupportedModelVariants) {
  json j = small_glm4();
  j["hidden_act"] = "gelu";
  EXPECT_CONTAINS(parse_error(j),
                  R"(config.json: field "hidden_act" is "gelu"; only "silu" is supported)");
  json c = chatglm3();
  c["rmsnorm"] = false;
  EXPECT_CONTAINS(
      parse_error(c),
      R"(config.json: field "rmsnorm" is false: only RMSNorm ChatGLM models are supported)");
  c = chatglm3();
  c["add_bias_linear"] = true;
  EXPECT_CONTAINS(parse_error(c), R"(config.json: field "add_bias_linear" is true)");
  c = chatglm3();
  c["apply_residual_connection_post_layernorm"] = true;
  EXPECT_CONTAINS(parse_error(c),
                  R"(config.json: field "apply_residual_connection_post_layernorm" is true)");
  c = chatglm3();
  c["original_rope"] = false;
  EXPECT_CONTAINS(parse_error(c), R"(config.json: field "original_rope" is false)");
  c = chatglm3();
  c["post_layer_norm"] = false;
  EXPECT_CONTAINS(parse_error(c), R"(config.json: field "post_layer_norm" is false)");
  c = chatglm3();
  c["num_hidden_layers"] = 30;
  EXPECT_CONTAINS(
      parse_error(c),
      R"(config.json: field "num_layers" (28) disagrees with "num_hidden_layers" (30))");
  json v1 = json::parse(
      R"({"architectures": ["ChatGLMModel"], "model_type": "chatglm", "hidden_size": 4096,
    "inner_hidden_size": 16384, "num_layers": 28, "position_encoding_2d": true, "vocab_size": 130528})");
  EXPECT_CONTAINS(parse_error(v1), "config.json: this is a first-generation ChatGLM-6B config");
}

TEST(ConfigErrors, TokenIdsOutsideTheVocabulary) {
  json j = small_glm4();
  j["eos_token_id"] = json::array({3, 1000});
  EXPECT_CONTAINS(
      parse_error(j),
      R"(config.json: field "eos_token_id" has token id 1000 outside the vocabulary [0, 1000) of "vocab_size")");
  j = small_glm4();
  j["pad_token_id"] = -1;
  EXPECT_CONTAINS(parse_error(j),
                  R"(config.json: field "pad_token_id" has token id -1 outside [0, 2^31))");
  j = small_glm4();
  j.erase("eos_token_id");  // the class default [151329, ...] does not fit a 1000-token vocabulary
  EXPECT_CONTAINS(parse_error(j),
                  R"(field "eos_token_id" has token id 151329 outside the vocabulary [0, 1000))");
}

TEST(ConfigErrors, FilesAndInvalidJson) {
  fs::path dir =
      fs::temp_directory_path() / ("glm4_test_config_errors_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  EXPECT_CONTAINS(error_of([&] { load_model_config(dir); }),
                  (dir / "config.json").string() + ": cannot open");
  {
    std::ofstream out(dir / "config.json");
    out << "{\n  \"model_type\": \"glm4\",\n  \"hidden_size\": 64,,\n}\n";
  }
  std::string e = error_of([&] { load_model_config(dir); });
  EXPECT_CONTAINS(e, (dir / "config.json").string() + ": invalid JSON at byte ");
  EXPECT_CONTAINS(e, "line 3, column");
  {
    std::ofstream out(dir / "config.json");
    out << small_glm4().dump();
    std::ofstream gen(dir / "generation_config.json");
    gen << R"({"eos_token_id": [3, 5000]})";
  }
  EXPECT_CONTAINS(
      error_of([&] { load_eos_ids(dir); }),
      (dir / "generation_config.json").string() +
          R"(: field "eos_token_id" has token id 5000 outside the vocabulary [0, 1000))");
  {
    std::ofstream gen(dir / "generation_config.json");
    gen << R"({"eos_token_id": )";
  }
  EXPECT_CONTAINS(error_of([&] { load_eos_ids(dir); }),
                  (dir / "generation_config.json").string() + ": invalid JSON");
  fs::remove_all(dir);
}

TEST(ConfigErrors, WritingInconsistentConfigs) {
  ModelConfig c = parse_model_config(small_glm4(), "config.json");
  c.eos_token_ids.clear();
  EXPECT_CONTAINS(error_of([&] { to_hf_json(c); }), "to_hf_json: glm4 needs eos_token_id");
  c = parse_model_config(small_glm4(), "config.json");
  c.post_norms = false;
  EXPECT_CONTAINS(error_of([&] { to_hf_json(c); }),
                  "to_hf_json: post_norms is false but the glm4 family always has");
  c = parse_model_config(chatglm3(), "config.json");
  c.rotary_dim = 32;
  EXPECT_CONTAINS(error_of([&] { to_hf_json(c); }),
                  "to_hf_json: chatglm always rotates kv_channels / 2 dims");
  c = parse_model_config(chatglm3(), "config.json");
  c.tie_word_embeddings = true;
  EXPECT_CONTAINS(error_of([&] { to_hf_json(c); }),
                  "tie_word_embeddings must be false for chatglm");
  c = parse_model_config(small_glm4(), "config.json");
  c.num_key_value_heads = 3;
  EXPECT_CONTAINS(
      error_of([&] { write_model_config(c, fs::temp_directory_path() / "glm4_never_written"); }),
      R"(to_hf_json: field "num_key_value_heads" (3) must divide "num_attention_heads" (4))");
  EXPECT_FALSE(fs::exists(fs::temp_directory_path() / "glm4_never_written"));
}

}  // namespace
}  // namespace glm4
