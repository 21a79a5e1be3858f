// config.json parsing of real GLM-family checkpoints, the documented pitfalls, writing back
// (round trip, atomic), generation_config.json eos ids, and the shipped configs/.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "base/check.h"
#include "model/config.h"
#include "tests/support/small_config.h"

namespace glm4 {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Family = ModelConfig::Family;

fs::path hf_config(const char* name) { return fs::path(GLM4_TEST_DATA) / "hf_configs" / name; }
fs::path shipped(const char* name) { return fs::path(GLM4_SOURCE_DIR) / "configs" / name; }

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> n{0};
    path = fs::temp_directory_path() /
           ("glm4_test_config_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// A small glm4 config.json to vary in tests.
json small_glm4() { return testing::small_glm4_config(); }

TEST(ConfigReal, Glm4_9B_0414) {
  ModelConfig c = load_model_config(hf_config("glm-4-9b-0414.json"));
  EXPECT_EQ(c.family, Family::Glm4);
  EXPECT_EQ(c.model_type, "glm4");
  EXPECT_EQ(c.vocab_size, 151552);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 13696);
  EXPECT_EQ(c.num_hidden_layers, 40);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rotary_dim, 64);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_TRUE(c.post_norms);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{151329, 151336, 151338}));
  EXPECT_EQ(c.pad_token_id, std::optional<int32_t>(151329));
  EXPECT_EQ(c.torch_dtype, DType::BF16);
  EXPECT_EQ(c.raw["transformers_version"], "4.51.3");
}

// transformers 5 moves rope_theta / partial_rotary_factor into rope_parameters and writes "dtype".
TEST(ConfigReal, Glm4SavedByTransformers5) {
  ModelConfig c = load_model_config(hf_config("glm4-9b-0414-finetune-transformers5.json"));
  ModelConfig ref = load_model_config(hf_config("glm-4-9b-0414.json"));
  EXPECT_EQ(c.torch_dtype, DType::BF16);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{151329});  // an int, not a list
  c.eos_token_ids = ref.eos_token_ids;
  EXPECT_EQ(c, ref);
}

TEST(ConfigReal, Glm4_9BChatHf) {
  ModelConfig c = load_model_config(hf_config("glm-4-9b-chat-hf.json"));
  EXPECT_EQ(c.family, Family::Glm);
  EXPECT_EQ(c.model_type, "glm");
  EXPECT_FALSE(c.post_norms);
  EXPECT_EQ(c.rms_norm_eps, 1.5625e-07);  // not GLM-4-0414's 1e-5
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rotary_dim, 64);  // the file has no partial_rotary_factor: the class default 0.5
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.intermediate_size, 13696);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{151329, 151336, 151338}));
  EXPECT_EQ(c.torch_dtype, DType::BF16);
}

TEST(ConfigReal, Glm4_9BChatRemoteCode) {
  ModelConfig c = load_model_config(hf_config("glm-4-9b-chat.json"));
  EXPECT_EQ(c.family, Family::ChatGlm);
  EXPECT_EQ(c.model_type, "chatglm");
  EXPECT_EQ(c.vocab_size, 151552);  // padded_vocab_size
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 13696);  // ffn_hidden_size
  EXPECT_EQ(c.num_hidden_layers, 40);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 2);    // multi_query_group_num
  EXPECT_EQ(c.head_dim, 128);             // kv_channels
  EXPECT_EQ(c.rotary_dim, 64);            // kv_channels / 2
  EXPECT_EQ(c.rope_theta, 5.0e6);         // 10000 * rope_ratio 500
  EXPECT_EQ(c.rms_norm_eps, 1.5625e-07);  // layernorm_epsilon
  EXPECT_TRUE(c.attention_bias);          // add_qkv_bias
  EXPECT_FALSE(c.post_norms);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.max_position_embeddings, 131072);  // seq_length
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{151329, 151336, 151338}));
  EXPECT_EQ(c.pad_token_id, std::optional<int32_t>(151329));
  EXPECT_EQ(c.torch_dtype, DType::BF16);
}

TEST(ConfigReal, ChatGlm3_6B) {
  ModelConfig c = load_model_config(hf_config("chatglm3-6b.json"));
  EXPECT_EQ(c.family, Family::ChatGlm);
  EXPECT_EQ(c.vocab_size, 65024);
  EXPECT_EQ(c.num_hidden_layers, 28);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.rope_theta, 10000.0);  // no rope_ratio: 1
  EXPECT_EQ(c.rotary_dim, 64);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{2});
  EXPECT_EQ(c.pad_token_id, std::optional<int32_t>(0));
  EXPECT_EQ(c.torch_dtype, DType::F16);
}

TEST(ConfigReal, LoadsFromDirectoryOrFile) {
  TempDir d;
  fs::copy_file(hf_config("chatglm3-6b.json"), d.path / "config.json");
  EXPECT_EQ(load_model_config(d.path), load_model_config(d.path / "config.json"));
  EXPECT_EQ(load_model_config(d.path), load_model_config(hf_config("chatglm3-6b.json")));
}

TEST(ConfigPitfalls, HeadDimDefaultsTo128NotHiddenOverHeads) {
  json j = small_glm4();
  j.erase("head_dim");
  ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.head_dim, 128);  // hidden / heads would be 16
  EXPECT_EQ(c.rotary_dim, 64);
}

TEST(ConfigPitfalls, EpsComesFromTheFile) {
  json j = small_glm4();
  EXPECT_EQ(parse_model_config(j, "config.json").rms_norm_eps, 1.5625e-07);  // class default
  j["rms_norm_eps"] = 1e-5;
  EXPECT_EQ(parse_model_config(j, "config.json").rms_norm_eps, 1e-5);
  j["rms_norm_eps"] = 1e-6;
  EXPECT_EQ(parse_model_config(j, "config.json").rms_norm_eps, 1e-6);
}

TEST(ConfigPitfalls, PartialRotaryFactorAppliedOnce) {
  json j = small_glm4();
  j["head_dim"] = 128;
  EXPECT_EQ(parse_model_config(j, "config.json").rotary_dim, 64);  // default 0.5
  j["partial_rotary_factor"] = 0.25;
  EXPECT_EQ(parse_model_config(j, "config.json").rotary_dim, 32);
  j["partial_rotary_factor"] = 1.0;
  EXPECT_EQ(parse_model_config(j, "config.json").rotary_dim, 128);
  j["head_dim"] = 24;
  j["partial_rotary_factor"] = 0.7;  // int(16.8) = 16, truncation as in Python
  EXPECT_EQ(parse_model_config(j, "config.json").rotary_dim, 16);
}

TEST(ConfigPitfalls, RopeParametersAndTopLevelKeys) {
  json j = small_glm4();
  j["rope_parameters"] = {
      {"rope_type", "default"}, {"rope_theta", 500000.0}, {"partial_rotary_factor", 0.25}};
  ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rotary_dim, 4);
  j["rope_theta"] = 500000.0;  // agreeing top-level copy is fine
  EXPECT_EQ(parse_model_config(j, "config.json").rope_theta, 500000.0);
  j["rope_scaling"] = nullptr;
  EXPECT_EQ(parse_model_config(j, "config.json").rope_theta, 500000.0);
}

TEST(ConfigPitfalls, KvHeadsDefaultToTheClassDefault) {
  json j = small_glm4();
  j.erase("num_key_value_heads");
  EXPECT_EQ(parse_model_config(j, "config.json").num_key_value_heads,
            2);  // GlmConfig/Glm4Config default
  j["num_key_value_heads"] = 4;
  EXPECT_EQ(parse_model_config(j, "config.json").num_key_value_heads, 4);
}

TEST(ConfigPitfalls, GlmDefaultsForTokensBiasAndTying) {
  json j = small_glm4();
  j["vocab_size"] = 151552;
  j.erase("eos_token_id");
  j.erase("pad_token_id");
  ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{151329, 151336, 151338}));
  EXPECT_EQ(c.pad_token_id, std::optional<int32_t>(151329));
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.torch_dtype, DType::F32);
  j["pad_token_id"] = nullptr;
  j["eos_token_id"] = json::array({5, 7});
  j["tie_word_embeddings"] = true;
  j["attention_bias"] = false;
  c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.pad_token_id, std::nullopt);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{5, 7}));
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
}

TEST(ConfigPitfalls, ChatGlmRopeRatioKvHeadsAndBias) {
  json j = read_json(hf_config("chatglm3-6b.json"));
  j["rope_ratio"] = 50;  // chatglm3-6b-32k
  EXPECT_EQ(parse_model_config(j, "config.json").rope_theta, 500000.0);
  j["multi_query_attention"] = false;  // group count is then ignored: plain multi-head attention
  EXPECT_EQ(parse_model_config(j, "config.json").num_key_value_heads, 32);
  j.erase("add_qkv_bias");  // ChatGLMConfig default: no q/k/v bias
  EXPECT_FALSE(parse_model_config(j, "config.json").attention_bias);
  j["kv_channels"] = nullptr;  // modeling_chatglm.py: hidden_size // num_attention_heads
  EXPECT_EQ(parse_model_config(j, "config.json").head_dim, 128);
  j["kv_channels"] = 64;
  ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rotary_dim, 32);
}

TEST(ConfigPitfalls, ArchitecturesWinOverModelType) {
  // Seen in the wild: a glm-4-9b-chat re-upload with model_type "glm" but ChatGLM weights and
  // fields.
  json j = read_json(hf_config("glm-4-9b-chat.json"));
  j["model_type"] = "glm";
  EXPECT_EQ(parse_model_config(j, "config.json").family, Family::ChatGlm);
  j.erase("architectures");
  j["model_type"] = "chatglm";
  EXPECT_EQ(parse_model_config(j, "config.json").family, Family::ChatGlm);
}

TEST(ConfigPitfalls, UnknownFieldsAreIgnored) {
  json j = small_glm4();
  ModelConfig plain = parse_model_config(j, "config.json");
  j["_comment"] = "anything";
  j["use_sliding_window"] = false;  // (quantization_config is read: test_quantized_model)
  j["some_future_key"] = json::array({1, "x"});
  ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c, plain);
  EXPECT_EQ(c.raw["some_future_key"][1], "x");
}

TEST(ConfigEquality, IgnoresRawButSeesEveryField) {
  ModelConfig a = load_model_config(hf_config("glm-4-9b-0414.json"));
  ModelConfig b = a;
  b.raw = json::object();
  EXPECT_EQ(a, b);
  b.rotary_dim = 32;
  EXPECT_FALSE(a == b);
  b = a;
  b.pad_token_id.reset();
  EXPECT_FALSE(a == b);
  b = a;
  b.rms_norm_eps = 1e-6;
  EXPECT_FALSE(a == b);
}

void expect_round_trip(const ModelConfig& c) {
  TempDir d;
  write_model_config(c, d.path);
  ModelConfig back = load_model_config(d.path);
  EXPECT_EQ(back, c) << to_hf_json(c).dump(2);
  // Atomic write: only config.json remains, no temporary file.
  int files = 0;
  for (const auto& e : fs::directory_iterator(d.path)) {
    ++files;
    EXPECT_EQ(e.path().filename(), "config.json");
  }
  EXPECT_EQ(files, 1);
  // Writing again over an existing file works and is stable.
  write_model_config(back, d.path);
  EXPECT_EQ(read_json(d.path / "config.json"), to_hf_json(back));
}

TEST(ConfigRoundTrip, EveryRealConfig) {
  for (const char* name : {"glm-4-9b-0414.json", "glm4-9b-0414-finetune-transformers5.json",
                           "glm-4-9b-chat-hf.json", "glm-4-9b-chat.json", "chatglm3-6b.json"}) {
    SCOPED_TRACE(name);
    expect_round_trip(load_model_config(hf_config(name)));
  }
}

TEST(ConfigRoundTrip, HandBuiltConfigs) {
  ModelConfig c;  // no raw file behind it
  c.family = Family::Glm4;
  c.model_type = "glm4";
  c.vocab_size = 300;
  c.hidden_size = 48;
  c.intermediate_size = 80;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 6;
  c.num_key_value_heads = 3;
  c.head_dim = 12;
  c.rotary_dim = 6;
  c.rope_theta = 12345.0;
  c.rms_norm_eps = 3e-6;
  c.attention_bias = false;
  c.tie_word_embeddings = true;
  c.post_norms = true;
  c.max_position_embeddings = 512;
  c.eos_token_ids = {7};
  c.pad_token_id.reset();
  c.torch_dtype = DType::F16;
  expect_round_trip(c);

  c.family = Family::Glm;
  c.model_type = "glm";
  c.post_norms = false;
  c.eos_token_ids = {1, 2, 3};
  expect_round_trip(c);

  c.family = Family::ChatGlm;
  c.model_type = "chatglm";
  c.tie_word_embeddings = false;
  c.rope_theta = 10000.0 * 2.5;
  c.eos_token_ids = {};
  c.pad_token_id = 0;
  expect_round_trip(c);
  c.num_key_value_heads = c.num_attention_heads;  // multi_query_attention false
  expect_round_trip(c);
}

TEST(ConfigWrite, RealFieldNamesAndKeptKeys) {
  ModelConfig c = load_model_config(hf_config("glm-4-9b-chat.json"));
  json out = to_hf_json(c);
  EXPECT_EQ(out["model_type"], "chatglm");
  EXPECT_EQ(out["architectures"], json::array({"ChatGLMModel"}));
  EXPECT_EQ(out["padded_vocab_size"], 151552);
  EXPECT_EQ(out["ffn_hidden_size"], 13696);
  EXPECT_EQ(out["kv_channels"], 128);
  EXPECT_EQ(out["multi_query_group_num"], 2);
  EXPECT_TRUE(out["rope_ratio"].is_number_integer());
  EXPECT_EQ(out["rope_ratio"], 500);
  EXPECT_EQ(out["num_layers"], 40);
  EXPECT_EQ(out["num_hidden_layers"], 40);
  EXPECT_EQ(out["seq_length"], 131072);
  EXPECT_EQ(out["layernorm_epsilon"], 1.5625e-07);
  EXPECT_EQ(out["auto_map"], c.raw["auto_map"]);  // keys we do not model are kept
  EXPECT_FALSE(out.contains("vocab_size"));

  ModelConfig t5 = load_model_config(hf_config("glm4-9b-0414-finetune-transformers5.json"));
  t5.rope_theta = 20000.0;  // a changed value must not leave a stale copy in rope_parameters
  json g = to_hf_json(t5);
  EXPECT_FALSE(g.contains("rope_parameters"));
  EXPECT_FALSE(g.contains("dtype"));
  EXPECT_EQ(g["rope_theta"], 20000.0);
  EXPECT_EQ(g["torch_dtype"], "bfloat16");
  EXPECT_EQ(g["partial_rotary_factor"], 0.5);
  EXPECT_EQ(g["architectures"], json::array({"Glm4ForCausalLM"}));
  EXPECT_EQ(g["use_cache"], false);  // kept from the file
  EXPECT_EQ(g["eos_token_id"], 151329);

  ModelConfig tiny = load_model_config(shipped("tiny.json"));
  json t = to_hf_json(tiny);
  EXPECT_FALSE(t.contains("_comment"));
  EXPECT_EQ(t["transformers_version"], "4.51.3");
}

TEST(ConfigEos, GenerationConfigWins) {
  TempDir d;
  fs::copy_file(hf_config("glm-4-9b-chat-hf.json"), d.path / "config.json");
  EXPECT_EQ(load_eos_ids(d.path),
            (std::vector<int32_t>{151329, 151336, 151338}));  // no generation_config
  write_text(d.path / "generation_config.json",
             R"({"_from_model_config": true, "pad_token_id": 151329})");
  EXPECT_EQ(load_eos_ids(d.path), (std::vector<int32_t>{151329, 151336, 151338}));  // no eos in it
  write_text(d.path / "generation_config.json",
             R"({"eos_token_id": [151329, 151336], "top_p": 0.8})");
  EXPECT_EQ(load_eos_ids(d.path), (std::vector<int32_t>{151329, 151336}));
  write_text(d.path / "generation_config.json", R"({"eos_token_id": 151338})");
  EXPECT_EQ(load_eos_ids(d.path), std::vector<int32_t>{151338});
}

TEST(ConfigShipped, AllLoad) {
  ModelConfig tiny = load_model_config(shipped("tiny.json"));
  EXPECT_EQ(tiny.family, Family::Glm4);
  EXPECT_EQ(tiny.vocab_size, 512);
  EXPECT_EQ(tiny.hidden_size, 64);
  EXPECT_EQ(tiny.num_hidden_layers, 2);
  EXPECT_EQ(tiny.num_attention_heads, 4);
  EXPECT_EQ(tiny.num_key_value_heads, 2);
  EXPECT_EQ(tiny.head_dim, 16);
  EXPECT_EQ(tiny.rotary_dim, 8);
  EXPECT_EQ(tiny.intermediate_size, 160);
  EXPECT_EQ(tiny.torch_dtype, DType::F32);

  ModelConfig mid = load_model_config(shipped("mid.json"));
  EXPECT_EQ(mid.hidden_size, 1024);
  EXPECT_EQ(mid.num_hidden_layers, 8);
  EXPECT_EQ(mid.num_attention_heads, 16);
  EXPECT_EQ(mid.num_key_value_heads, 2);
  EXPECT_EQ(mid.head_dim, 64);
  EXPECT_EQ(mid.rotary_dim, 32);
  EXPECT_EQ(mid.intermediate_size, 2816);
  EXPECT_EQ(mid.vocab_size, 32000);

  EXPECT_EQ(load_model_config(shipped("glm-4-9b-0414.json")),
            load_model_config(hf_config("glm-4-9b-0414.json")));

  ModelConfig big = load_model_config(shipped("glm-4-32b-0414.json"));
  EXPECT_EQ(big.hidden_size, 6144);
  EXPECT_EQ(big.num_hidden_layers, 61);
  EXPECT_EQ(big.num_attention_heads, 48);
  EXPECT_EQ(big.intermediate_size, 23040);
  EXPECT_FALSE(big.attention_bias);
  EXPECT_EQ(big.rotary_dim, 64);
  for (const char* name : {"tiny.json", "mid.json", "glm-4-9b-0414.json", "glm-4-32b-0414.json"}) {
    SCOPED_TRACE(name);
    expect_round_trip(load_model_config(shipped(name)));
  }
}

}  // namespace
}  // namespace glm4
