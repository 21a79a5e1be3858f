// Model and adapter export to GGUF: for each family the converter's architecture, keys, tensor
// names, ggml dims and types; values as stored; the fused ChatGLM q|k|v; the f16 fallback; and the
// LoRA adapter file (its delta W equals the adapter's, also when q/k/v are fused).
#include <gtest/gtest.h>

#include <set>

#include "base/dtype.h"
#include "export/ggml_quants.h"
#include "export/gguf_export.h"
#include "export/gguf_lora_export.h"
#include "model/save.h"
#include "support/temp_dir.h"
#include "tests/support/gguf_reader.h"
#include "tests/support/random_values.h"

namespace glm4 {
namespace {

using glm4::testing::randn;
using glm4::testing::TempDir;
using glm4::testing::throws_with;

std::string data_dir(const std::string& name) { return std::string(GLM4_TEST_DATA) + "/" + name; }

std::vector<float> as_type(const std::vector<float>& x, GgmlType t) {
  std::vector<uint8_t> b;
  ggml_encode(t, x.data(), int64_t(x.size()), b);
  std::vector<float> y(x.size());
  ggml_decode(t, b.data(), int64_t(x.size()), y.data());
  return y;
}

std::vector<float> param_f32(Glm4Model& m, const std::string& name) {
  std::vector<float> out;
  m.visit([&](const std::string& n, Param& p) {
    if (n == name) out = p.to_f32().to_vector();
  });
  EXPECT_FALSE(out.empty()) << name;
  return out;
}

std::set<std::string> names_of(const GgufFile& f) {
  std::set<std::string> s;
  for (const auto& t : f.tensors()) s.insert(t.name);
  return s;
}

std::set<std::string> expected_names(int layers, const std::vector<std::string>& per_layer) {
  std::set<std::string> s = {"token_embd.weight", "output_norm.weight", "output.weight"};
  for (int i = 0; i < layers; ++i)
    for (const auto& n : per_layer) s.insert("blk." + std::to_string(i) + "." + n);
  return s;
}

TEST(GgufExport, Glm4TinyEveryTypeNamesDimsTypesValuesAndKeys) {
  TempDir dir;
  auto model = load_model(data_dir("tiny_glm4"));
  for (GgmlType type :
       {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0}) {
    const auto out = dir / (std::string(ggml_type_name(type)) + ".gguf");
    const GgufExportResult r = export_gguf_model(*model, data_dir("tiny_glm4"), out, type);
    EXPECT_EQ(r.arch, "glm4");
    auto f = GgufFile::open(out);
    EXPECT_EQ(
        names_of(*f),
        expected_names(
            2, {"attn_norm.weight", "attn_q.weight", "attn_q.bias", "attn_k.weight", "attn_k.bias",
                "attn_v.weight", "attn_v.bias", "attn_output.weight", "post_attention_norm.weight",
                "ffn_norm.weight", "ffn_up.weight", "ffn_down.weight", "post_ffw_norm.weight"}));
    EXPECT_EQ(f->tensor("token_embd.weight").ne, (std::vector<int64_t>{64, 512}));
    EXPECT_EQ(f->tensor("blk.0.attn_k.weight").ne, (std::vector<int64_t>{64, 32}));
    EXPECT_EQ(f->tensor("blk.1.ffn_up.weight").ne, (std::vector<int64_t>{64, 320}));  // gate | up
    EXPECT_EQ(f->tensor("blk.1.ffn_down.weight").ne, (std::vector<int64_t>{160, 64}));
    EXPECT_EQ(f->tensor("blk.0.attn_q.bias").ne, (std::vector<int64_t>{64}));
    for (const auto& t : f->tensors()) {
      const bool small = t.ne.size() == 1 || t.name.find("_norm.") != std::string::npos;
      EXPECT_EQ(t.type, small ? GgmlType::F32 : type) << t.name;
    }
    // Values: the model's fp32 values rounded once to the tensor's type.
    const std::pair<const char*, const char*> pairs[] = {
        {"token_embd.weight", "model.embed_tokens.weight"},
        {"blk.1.ffn_up.weight", "model.layers.1.mlp.gate_up_proj.weight"},
        {"blk.0.attn_q.bias", "model.layers.0.self_attn.q_proj.bias"},
        {"blk.0.post_attention_norm.weight", "model.layers.0.post_self_attn_layernorm.weight"},
        {"blk.0.ffn_norm.weight", "model.layers.0.post_attention_layernorm.weight"},
        {"output.weight", "lm_head.weight"}};
    for (const auto& [g, ours] : pairs) {
      const GgufTensorInfo& t = f->tensor(g);
      EXPECT_EQ(t.to_f32(), as_type(param_f32(*model, ours), t.type)) << g;
    }
    EXPECT_EQ(f->get_string("general.architecture"), "glm4");
    EXPECT_EQ(f->get_string("general.type"), "model");
    EXPECT_EQ(f->get_string("general.name"), "tiny_glm4");
    EXPECT_EQ(f->get_string("general.size_label"), "152K");
    EXPECT_EQ(f->get_u32("general.file_type"), llama_file_type(type));
    EXPECT_EQ(f->get_u32("general.quantization_version"), 2u);
    EXPECT_EQ(f->get_u32("glm4.block_count"), 2u);
    EXPECT_EQ(f->get_u32("glm4.context_length"), 1024u);
    EXPECT_EQ(f->get_u32("glm4.embedding_length"), 64u);
    EXPECT_EQ(f->get_u32("glm4.feed_forward_length"), 160u);
    EXPECT_EQ(f->get_u32("glm4.attention.head_count"), 4u);
    EXPECT_EQ(f->get_u32("glm4.attention.head_count_kv"), 2u);
    EXPECT_EQ(f->get_u32("glm4.attention.key_length"), 16u);
    EXPECT_EQ(f->get_u32("glm4.attention.value_length"), 16u);
    EXPECT_EQ(f->get_u32("glm4.rope.dimension_count"),
              8u);  // head_dim 16 * partial_rotary_factor 0.5
    EXPECT_EQ(f->get_f32("glm4.rope.freq_base"), 10000.0f);
    EXPECT_EQ(f->get_f32("glm4.attention.layer_norm_rms_epsilon"), 1e-5f);
    EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "none");  // the fixture has no tokenizer
    EXPECT_EQ(f->get_u32("glm4.vocab_size"), 512u);            // so llama.cpp sizes the vocab
  }
}

TEST(GgufExport, ChatGlmFusesQkvAndUsesItsKeys) {
  TempDir dir;
  auto model = load_model(data_dir("tiny_chatglm"));
  export_gguf_model(*model, data_dir("tiny_chatglm"), dir / "c.gguf", GgmlType::F32);
  auto f = GgufFile::open(dir / "c.gguf");
  EXPECT_EQ(names_of(*f), expected_names(2, {"attn_norm.weight", "attn_qkv.weight", "attn_qkv.bias",
                                             "attn_output.weight", "ffn_norm.weight",
                                             "ffn_up.weight", "ffn_down.weight"}));
  EXPECT_EQ(f->tensor("blk.1.attn_qkv.weight").ne, (std::vector<int64_t>{64, 64 + 32 + 32}));
  for (const char* part : {"weight", "bias"}) {
    std::vector<float> want;
    for (const char* p : {"q", "k", "v"}) {
      const auto v =
          param_f32(*model, std::string("model.layers.1.self_attn.") + p + "_proj." + part);
      want.insert(want.end(), v.begin(), v.end());
    }
    EXPECT_EQ(f->tensor(std::string("blk.1.attn_qkv.") + part).to_f32(), want) << part;
  }
  EXPECT_EQ(f->get_string("general.architecture"), "chatglm");
  EXPECT_EQ(f->get_u32("chatglm.context_length"), 1024u);  // seq_length
  EXPECT_EQ(f->get_u32("chatglm.feed_forward_length"), 160u);
  EXPECT_EQ(f->get_u32("chatglm.attention.head_count_kv"), 2u);
  EXPECT_EQ(f->get_u32("chatglm.rope.dimension_count"), 8u);    // kv_channels / 2
  EXPECT_EQ(f->get_f32("chatglm.rope.freq_base"), 5000000.0f);  // 10000 * rope_ratio
  EXPECT_EQ(f->get_f32("chatglm.attention.layer_norm_rms_epsilon"), 1.5625e-07f);
}

TEST(GgufExport, GlmHfIsChatGlmWithSeparateQkvAndSaysWhereItDiffersFromTheConverter) {
  TempDir dir;
  auto model = load_model(data_dir("tiny_glm"));
  const GgufExportResult r =
      export_gguf_model(*model, data_dir("tiny_glm"), dir / "g.gguf", GgmlType::BF16);
  auto f = GgufFile::open(dir / "g.gguf");
  EXPECT_EQ(r.arch, "chatglm");
  EXPECT_EQ(names_of(*f),
            expected_names(2, {"attn_norm.weight", "attn_q.weight", "attn_q.bias", "attn_k.weight",
                               "attn_k.bias", "attn_v.weight", "attn_v.bias", "attn_output.weight",
                               "ffn_norm.weight", "ffn_up.weight", "ffn_down.weight"}));
  EXPECT_EQ(f->get_f32("chatglm.attention.layer_norm_rms_epsilon"), 1.5625e-07f);
  bool noted = false;
  for (const auto& n : r.notes) noted = noted || n.find("GlmForCausalLM") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(GgufExport, RowsNotAMultipleOf32FallBackToF16WithANote) {
  TempDir dir;
  ModelConfig c = load_model_config(data_dir("tiny_glm4"));
  c.intermediate_size = 40;  // down_proj rows of 40 values
  c.raw["intermediate_size"] = 40;
  Glm4Model model(c);
  init_random(model, 5);
  const GgufExportResult r = export_gguf_model(model, dir.path(), dir / "q.gguf", GgmlType::Q4_0);
  auto f = GgufFile::open(dir / "q.gguf");
  EXPECT_EQ(f->tensor("blk.0.ffn_down.weight").type, GgmlType::F16);
  EXPECT_EQ(f->tensor("blk.0.ffn_up.weight").type, GgmlType::Q4_0);
  ASSERT_FALSE(r.notes.empty());
  bool noted = false;
  for (const auto& n : r.notes)
    noted = noted || n.find("blk.0.ffn_down.weight: rows of 40") != std::string::npos;
  EXPECT_TRUE(noted);
  bool fell = false;
  EXPECT_EQ(gguf_tensor_type("blk.0.attn_q.bias", {64}, GgmlType::Q8_0, &fell), GgmlType::F32);
  EXPECT_EQ(gguf_size_label(5'200'000), "5.2M");
  EXPECT_EQ(gguf_size_label(9'400'000'000), "9.4B");
  EXPECT_EQ(gguf_size_label(400), "0.40K");
}

// delta W = (alpha / rank) * B A of the adapter pair `base` in file f, [out, in].
std::vector<double> lora_delta(const GgufFile& f, const std::string& base) {
  const GgufTensorInfo& a = f.tensor(base + ".lora_a");
  const GgufTensorInfo& b = f.tensor(base + ".lora_b");
  const int64_t in = a.ne[0], rank = a.ne[1], out = b.ne[1];
  EXPECT_EQ(b.ne[0], rank);
  const std::vector<float> av = a.to_f32(), bv = b.to_f32();
  const double s = f.get_f32("adapter.lora.alpha") / double(rank);
  std::vector<double> d(size_t(out * in), 0.0);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t r = 0; r < rank; ++r)
      for (int64_t i = 0; i < in; ++i)
        d[size_t(o * in + i)] += s * bv[size_t(o * rank + r)] * av[size_t(r * in + i)];
  return d;
}

// A and B from seeds 2 * seed and 2 * seed + 1.
GgufLoraModule random_module(const std::string& path, int64_t rank, int64_t in, int64_t out,
                             uint32_t seed) {
  return {path,
          rank,
          in,
          out,
          randn(size_t(rank * in), 2 * seed),
          randn(size_t(out * rank), 2 * seed + 1)};
}

TEST(GgufLoraExport, Glm4PairsKeepOrientationAndScale) {
  TempDir dir;
  const ModelConfig c = load_model_config(data_dir("tiny_glm4"));
  const std::vector<GgufLoraModule> mods = {
      random_module("model.layers.0.self_attn.q_proj", 4, 64, 64, 1),
      random_module("model.layers.1.mlp.gate_up_proj", 4, 64, 320, 2),
      random_module("model.layers.1.mlp.down_proj", 4, 160, 64, 3)};
  const double scale = 32.0 / std::sqrt(4.0);  // rsLoRA-style: alpha / sqrt(r)
  const auto r = export_gguf_lora(c, mods, scale, "ad", dir / "l.gguf", GgmlType::F32);
  auto f = GgufFile::open(dir / "l.gguf");
  EXPECT_EQ(r.tensors, 6);
  EXPECT_EQ(f->get_string("general.type"), "adapter");
  EXPECT_EQ(f->get_string("adapter.type"), "lora");
  EXPECT_EQ(f->get_string("general.architecture"), "glm4");
  EXPECT_EQ(f->get_f32("adapter.lora.alpha"), float(scale * 4));
  EXPECT_EQ(f->tensor("blk.0.attn_q.weight.lora_a").ne, (std::vector<int64_t>{64, 4}));
  EXPECT_EQ(f->tensor("blk.0.attn_q.weight.lora_b").ne, (std::vector<int64_t>{4, 64}));
  EXPECT_EQ(f->tensor("blk.1.ffn_up.weight.lora_b").ne, (std::vector<int64_t>{4, 320}));
  EXPECT_EQ(f->tensor("blk.1.ffn_down.weight.lora_a").to_f32(), mods[2].a);
  EXPECT_EQ(f->tensor("blk.1.ffn_down.weight.lora_b").to_f32(), mods[2].b);
  EXPECT_TRUE(throws_with(
      [&] {
        export_gguf_lora(c, {random_module("model.layers.0.self_attn.q_proj", 4, 32, 64, 1)}, 1.0,
                         "x", dir / "bad.gguf", GgmlType::F32);
      },
      {"model.layers.0.self_attn.q_proj", "another model"}));
  EXPECT_TRUE(throws_with(
      [&] { export_gguf_lora(c, mods, 1.0, "x", dir / "q.gguf", GgmlType::Q8_0); }, {"q8_0"}));
}

TEST(GgufLoraExport, ChatGlmQkvBecomesOneBlockDiagonalAdapterWithTheSameDelta) {
  TempDir dir;
  const ModelConfig c = load_model_config(data_dir("tiny_chatglm"));
  const double scale = 2.0;
  for (bool with_k : {true, false}) {
    std::vector<GgufLoraModule> mods = {
        random_module("model.layers.1.self_attn.q_proj", 4, 64, 64, 1),
        random_module("model.layers.1.self_attn.v_proj", 4, 64, 32, 3)};
    if (with_k) mods.push_back(random_module("model.layers.1.self_attn.k_proj", 4, 64, 32, 2));
    export_gguf_lora(c, mods, scale, "ad", dir / "c.gguf", GgmlType::F32);
    auto f = GgufFile::open(dir / "c.gguf");
    EXPECT_EQ(f->get_string("general.architecture"), "chatglm");
    EXPECT_EQ(f->tensor("blk.1.attn_qkv.weight.lora_a").ne,
              (std::vector<int64_t>{64, with_k ? 12 : 8}));
    const std::vector<double> d = lora_delta(*f, "blk.1.attn_qkv.weight");
    ASSERT_EQ(d.size(), size_t(128 * 64));
    const int64_t offset[3] = {0, 64, 96};  // q | k | v rows
    for (int part = 0; part < 3; ++part) {
      const GgufLoraModule* m = nullptr;
      for (const auto& x : mods)
        if (x.module.find("qkv"[part] + std::string("_proj")) != std::string::npos) m = &x;
      for (int64_t o = 0; o < (part == 0 ? 64 : 32); ++o)
        for (int64_t i = 0; i < 64; ++i) {
          double want = 0;
          for (int64_t r = 0; m && r < 4; ++r)
            want += scale * m->b[size_t(o * 4 + r)] * m->a[size_t(r * 64 + i)];
          ASSERT_NEAR(d[size_t((offset[part] + o) * 64 + i)], want, 1e-4 * (1 + std::fabs(want)))
              << "part " << part << " row " << o;
        }
    }
  }
}

}  // namespace
}  // namespace glm4
