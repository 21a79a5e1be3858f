// GGUF export of glm4_moe models (llama.cpp's glm4moe): tensor names per layer kind (dense,
// MoE), ggml dims and types, the MoE metadata keys, the MTP layer left out, and that the stacked
// [experts, out, in] tensors hold each expert's weights as the safetensors files have them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "base/dtype.h"
#include "export/ggml_quants.h"
#include "export/gguf_export.h"
#include "export/gguf_lora_export.h"
#include "export/gguf_tensor_map.h"
#include "export/gguf_vocab.h"
#include "io/safetensors.h"
#include "support/temp_dir.h"
#include "tests/support/expect_error.h"
#include "tests/support/gguf_reader.h"
#include "tests/support/random_values.h"

namespace glm4 {
namespace {

using glm4::testing::expect_error;
using glm4::testing::randn;
using glm4::testing::TempDir;

std::string moe_dir(const std::string& name) {
  return std::string(GLM4_TEST_DATA) + "/moe/" + name;
}

std::vector<float> as_type(const std::vector<float>& x, GgmlType t) {
  std::vector<uint8_t> b;
  ggml_encode(t, x.data(), int64_t(x.size()), b);
  std::vector<float> y(x.size());
  ggml_decode(t, b.data(), int64_t(x.size()), y.data());
  return y;
}

// A tensor of a model's safetensors file, widened to fp32 (F32 or BF16 in the fixtures).
std::vector<float> stored(const SafetensorsFile& f, const std::string& name) {
  const TensorInfo& t = f.at(name);
  std::vector<float> out(size_t(t.numel()));
  if (t.dtype == "F32") {
    std::memcpy(out.data(), t.data, t.nbytes);
  } else {
    EXPECT_EQ(t.dtype, "BF16") << name;
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      out[i] = bf16_to_f32(h);
    }
  }
  return out;
}

std::set<std::string> names_of(const GgufFile& f) {
  std::set<std::string> s;
  for (const auto& t : f.tensors()) s.insert(t.name);
  return s;
}

// The names llama.cpp's glm4moe loader asks for: `dense` leading layers, then MoE layers.
std::set<std::string> expected_names(int layers, int dense, bool qk_norm, bool bias) {
  std::set<std::string> s = {"token_embd.weight", "output_norm.weight", "output.weight"};
  for (int i = 0; i < layers; ++i) {
    std::vector<std::string> per = {"attn_norm.weight",   "attn_q.weight",
                                    "attn_k.weight",      "attn_v.weight",
                                    "attn_output.weight", "post_attention_norm.weight"};
    if (bias) per.insert(per.end(), {"attn_q.bias", "attn_k.bias", "attn_v.bias"});
    if (qk_norm) per.insert(per.end(), {"attn_q_norm.weight", "attn_k_norm.weight"});
    if (i < dense) {
      per.insert(per.end(), {"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"});
    } else {
      per.insert(per.end(), {"ffn_gate_inp.weight", "exp_probs_b.bias", "ffn_gate_exps.weight",
                             "ffn_up_exps.weight", "ffn_down_exps.weight", "ffn_gate_shexp.weight",
                             "ffn_up_shexp.weight", "ffn_down_shexp.weight"});
    }
    for (const auto& n : per) s.insert("blk." + std::to_string(i) + "." + n);
  }
  return s;
}

using Dims = std::vector<int64_t>;

TEST(GgufExportMoe, TinyMoeEveryTypeNamesDimsTypesAndKeys) {
  TempDir dir;
  auto model = load_model(moe_dir("tiny_moe"));
  for (GgmlType type :
       {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0}) {
    const auto out = dir / (std::string(ggml_type_name(type)) + ".gguf");
    const GgufExportResult r = export_gguf_model(*model, moe_dir("tiny_moe"), out, type);
    EXPECT_EQ(r.arch, "glm4moe");
    auto f = GgufFile::open(out);
    // Three decoder layers (the first dense); the MTP layer 3 of the files is left out.
    EXPECT_EQ(names_of(*f), expected_names(3, 1, true, true)) << ggml_type_name(type);
    EXPECT_EQ(f->tensor("token_embd.weight").ne, (Dims{32, 256}));
    EXPECT_EQ(f->tensor("blk.0.ffn_gate.weight").ne, (Dims{32, 64}));
    EXPECT_EQ(f->tensor("blk.0.ffn_down.weight").ne, (Dims{64, 32}));
    EXPECT_EQ(f->tensor("blk.1.attn_q.weight").ne, (Dims{32, 64}));
    EXPECT_EQ(f->tensor("blk.1.attn_q_norm.weight").ne, (Dims{16}));
    EXPECT_EQ(f->tensor("blk.1.ffn_gate_inp.weight").ne, (Dims{32, 16}));
    EXPECT_EQ(f->tensor("blk.1.exp_probs_b.bias").ne, (Dims{16}));
    EXPECT_EQ(f->tensor("blk.2.ffn_gate_exps.weight").ne, (Dims{32, 16, 16}));  // {in, out, E}
    EXPECT_EQ(f->tensor("blk.2.ffn_up_exps.weight").ne, (Dims{32, 16, 16}));
    EXPECT_EQ(f->tensor("blk.2.ffn_down_exps.weight").ne, (Dims{16, 32, 16}));
    EXPECT_EQ(f->tensor("blk.2.ffn_up_shexp.weight").ne, (Dims{32, 16}));
    EXPECT_EQ(f->tensor("blk.2.ffn_down_shexp.weight").ne, (Dims{16, 32}));
    const bool quant = ggml_block_size(type) > 1;
    for (const auto& t : f->tensors()) {
      const bool small = t.ne.size() == 1 || t.name.find("_norm.") != std::string::npos ||
                         t.name.find("ffn_gate_inp") != std::string::npos;
      // Rows of 16 values (down projections of the experts) cannot be q8_0/q4_0: f16.
      const GgmlType want = small ? GgmlType::F32 : quant && t.ne[0] % 32 ? GgmlType::F16 : type;
      EXPECT_EQ(t.type, want) << t.name << " asked " << ggml_type_name(type);
    }
    EXPECT_EQ(f->get_string("general.architecture"), "glm4moe");
    EXPECT_EQ(f->get_string("general.name"), "tiny_moe");
    EXPECT_EQ(f->get_u32("general.file_type"), llama_file_type(type));
    const std::pair<const char*, uint32_t> u32s[] = {
        {"block_count", 3},
        {"context_length", 1024},
        {"embedding_length", 32},
        {"feed_forward_length", 64},
        {"attention.head_count", 4},
        {"attention.head_count_kv", 2},
        {"attention.key_length", 16},
        {"attention.value_length", 16},
        {"rope.dimension_count", 8},  // head_dim 16 * partial_rotary_factor 0.5
        {"expert_count", 16},
        {"expert_used_count", 4},
        {"expert_group_count", 4},
        {"expert_group_used_count", 2},
        {"expert_feed_forward_length", 16},
        {"expert_shared_count", 1},
        {"leading_dense_block_count", 1},
        {"expert_gating_func", 2},  // sigmoid
        {"nextn_predict_layers", 0},
        {"vocab_size", 256},  // no tokenizer in the fixture
    };
    for (const auto& [key, value] : u32s)
      EXPECT_EQ(f->get_u32(std::string("glm4moe.") + key), value) << key;
    EXPECT_EQ(f->get_f32("glm4moe.rope.freq_base"), 1e6f);
    EXPECT_EQ(f->get_f32("glm4moe.attention.layer_norm_rms_epsilon"), 1e-5f);
    EXPECT_EQ(f->get_f32("glm4moe.expert_weights_scale"), 2.5f);
    EXPECT_TRUE(f->at("glm4moe.expert_weights_norm", GgufType::Bool).b);
    EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "none");
    bool mtp_note = false;
    for (const auto& n : r.notes) mtp_note |= n.find("MTP") != std::string::npos;
    EXPECT_TRUE(mtp_note);
  }
}

// Slice e of blk.L.ffn_P_exps is experts.e.P_proj of layer L, as stored; the router, its bias
// and the shared expert map one to one.
void expect_experts_match(const std::string& fixture, GgmlType type) {
  TempDir dir;
  auto model = load_model(moe_dir(fixture));
  export_gguf_model(*model, moe_dir(fixture), dir / "m.gguf", type);
  auto f = GgufFile::open(dir / "m.gguf");
  auto st = SafetensorsFile::open(moe_dir(fixture) + "/model.safetensors");
  const int64_t experts = model->config.n_routed_experts;
  for (int layer : {1, 2}) {
    const std::string ours = "model.layers." + std::to_string(layer) + ".mlp.";
    const std::string blk = "blk." + std::to_string(layer) + ".";
    for (const char* proj : {"gate", "up", "down"}) {
      const GgufTensorInfo& t = f->tensor(blk + "ffn_" + proj + "_exps.weight");
      ASSERT_EQ(t.ne.size(), 3u);
      ASSERT_EQ(t.ne[2], experts);
      const std::vector<float> all = t.to_f32();
      const size_t per = size_t(t.ne[0] * t.ne[1]);
      for (int64_t e : {int64_t(0), int64_t(7), experts - 1}) {
        const std::string name =
            ours + "experts." + std::to_string(e) + "." + proj + "_proj.weight";
        const std::vector<float> slice(all.begin() + e * per, all.begin() + (e + 1) * per);
        EXPECT_EQ(slice, as_type(stored(*st, name), t.type)) << name << " in " << t.name;
      }
      const GgufTensorInfo& shared = f->tensor(blk + "ffn_" + proj + "_shexp.weight");
      EXPECT_EQ(shared.to_f32(),
                as_type(stored(*st, ours + "shared_experts." + proj + "_proj.weight"), shared.type))
          << shared.name;
    }
    EXPECT_EQ(f->tensor(blk + "ffn_gate_inp.weight").to_f32(), stored(*st, ours + "gate.weight"));
    EXPECT_EQ(f->tensor(blk + "exp_probs_b.bias").to_f32(),
              stored(*st, ours + "gate.e_score_correction_bias"));
  }
}

TEST(GgufExportMoe, StackedExpertsHoldEachExpertAsStored) {
  expect_experts_match("tiny_moe", GgmlType::F32);
  expect_experts_match("tiny_moe", GgmlType::Q8_0);  // each expert's rows quantized as its own
  expect_experts_match("tiny_moe_bf16", GgmlType::BF16);
}

TEST(GgufExportMoe, PlainFixtureTwoDenseLayersNoQkNormNoBiasTwoSharedExperts) {
  TempDir dir;
  auto model = load_model(moe_dir("tiny_moe_plain"));
  export_gguf_model(*model, moe_dir("tiny_moe_plain"), dir / "p.gguf", GgmlType::F32);
  auto f = GgufFile::open(dir / "p.gguf");
  EXPECT_EQ(names_of(*f), expected_names(3, 2, false, false));
  EXPECT_EQ(f->tensor("blk.2.ffn_gate_shexp.weight").ne, (Dims{32, 32}));  // 2 shared of 16
  EXPECT_EQ(f->tensor("blk.2.ffn_down_exps.weight").ne, (Dims{16, 32, 16}));
  EXPECT_EQ(f->get_u32("glm4moe.leading_dense_block_count"), 2u);
  EXPECT_EQ(f->get_u32("glm4moe.expert_shared_count"), 2u);
  EXPECT_EQ(f->get_u32("glm4moe.expert_used_count"), 3u);
  EXPECT_EQ(f->get_u32("glm4moe.expert_group_count"), 1u);
  EXPECT_EQ(f->get_u32("glm4moe.expert_group_used_count"), 1u);
  EXPECT_EQ(f->get_u32("glm4moe.rope.dimension_count"), 12u);  // 16 * 0.75 (rope_parameters)
  EXPECT_EQ(f->get_f32("glm4moe.rope.freq_base"), 50000.0f);
  EXPECT_EQ(f->get_f32("glm4moe.attention.layer_norm_rms_epsilon"), 1e-6f);
  EXPECT_EQ(f->get_f32("glm4moe.expert_weights_scale"), 1.5f);
  EXPECT_FALSE(f->at("glm4moe.expert_weights_norm", GgufType::Bool).b);
}

TEST(GgufExportMoe, KeepingEveryGroupIsWrittenAsOneGroupWithANote) {
  TempDir dir;
  auto model = load_model(moe_dir("tiny_moe"));
  model->config.topk_group = model->config.n_group;  // 4 of 4: no group is dropped
  const GgufExportResult r =
      export_gguf_model(*model, moe_dir("tiny_moe"), dir / "g.gguf", GgmlType::F32);
  auto f = GgufFile::open(dir / "g.gguf");
  EXPECT_EQ(f->get_u32("glm4moe.expert_group_count"), 1u);
  EXPECT_EQ(f->get_u32("glm4moe.expert_group_used_count"), 1u);
  bool note = false;
  for (const auto& n : r.notes) note |= n.find("written as one group") != std::string::npos;
  EXPECT_TRUE(note);
}

TEST(GgufExportMoe, PlanRefusesAMissingOrMisshapenExpertNamingTheTensor) {
  const ModelConfig c = load_model_config(moe_dir("tiny_moe"));
  std::vector<std::pair<std::string, std::vector<int64_t>>> ours;
  for (int e = 0; e < 16; ++e) {
    if (e == 5) continue;
    ours.push_back(
        {"model.layers.1.mlp.experts." + std::to_string(e) + ".up_proj.weight", {16, 32}});
  }
  expect_error([&] { gguf_tensor_plan(c, ours); }, "blk.1.ffn_up_exps.weight is missing expert 5");
  ours.push_back({"model.layers.1.mlp.experts.5.up_proj.weight", {16, 16}});
  expect_error([&] { gguf_tensor_plan(c, ours); }, "'model.layers.1.mlp.experts.5.up_proj.weight'");
  ours.back().second = {16, 32};
  const auto plan = gguf_tensor_plan(c, ours);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].shape, (Dims{16, 16, 32}));
  EXPECT_EQ(plan[0].sources[5], "model.layers.1.mlp.experts.5.up_proj.weight");
  EXPECT_EQ(plan[0].sources[10], "model.layers.1.mlp.experts.10.up_proj.weight");  // not "1", "10"
  int part = -1;
  bool expert = false;
  EXPECT_EQ(gguf_weight_name(c, "model.layers.2.mlp.experts.11.down_proj", &part, &expert),
            "blk.2.ffn_down_exps.weight");
  EXPECT_TRUE(expert);
  EXPECT_EQ(part, 11);
  expect_error([&] { gguf_weight_name(c, "model.layers.2.mlp.experts.x.down_proj", &part); },
               "no GGUF name for tensor 'model.layers.2.mlp.experts.x.down_proj.weight'");
}

// The converter's _set_vocab_glm special ids, over the GLM-4 tokenizer.json.
TEST(GgufExportMoe, VocabularyHasTheGlmMoeSpecialIds) {
  TempDir dir;
  std::filesystem::create_symlink(
      std::string(GLM4_TEST_DATA) + "/tokenizers/glm4-0414/tokenizer.derived.json",
      dir / "tokenizer.json");
  const GgufVocab v = build_gguf_vocab(dir.path(), GgufVocabStyle::Glm4Moe, 151552);
  EXPECT_EQ(v.special("bos"), 151331);         // [gMASK]
  EXPECT_EQ(v.special("eot"), 151336);         // <|user|>
  EXPECT_EQ(v.special("unk"), 151329);         // <|endoftext|>
  EXPECT_EQ(v.special("eom"), 151338);         // <|observation|>
  EXPECT_FALSE(v.special("eos").has_value());  // only from tokenizer_config / config.json
}

GgufLoraModule random_module(const std::string& path, int64_t rank, int64_t in, int64_t out,
                             uint32_t seed) {
  return {path,
          rank,
          in,
          out,
          randn(size_t(rank * in), 2 * seed),
          randn(size_t(out * rank), 2 * seed + 1)};
}

// Expert e's delta W = (alpha / R) * B_e A_e of a stacked pair (A {in, R, E}, B {R, out, E}),
// as llama.cpp's mul_mat_id applies it; [out, in].
std::vector<double> expert_delta(const GgufFile& f, const std::string& base, int64_t e) {
  const GgufTensorInfo& a = f.tensor(base + ".lora_a");
  const GgufTensorInfo& b = f.tensor(base + ".lora_b");
  const int64_t in = a.ne[0], rank = a.ne[1], out = b.ne[1];
  EXPECT_EQ(b.ne[0], rank);
  EXPECT_EQ(a.ne[2], b.ne[2]);
  const std::vector<float> av = a.to_f32(), bv = b.to_f32();
  const double s = f.get_f32("adapter.lora.alpha") / double(rank);
  std::vector<double> d(size_t(out * in), 0.0);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t r = 0; r < rank; ++r)
      for (int64_t i = 0; i < in; ++i)
        d[size_t(o * in + i)] +=
            s * bv[size_t((e * out + o) * rank + r)] * av[size_t((e * rank + r) * in + i)];
  return d;
}

void expect_delta(const std::vector<double>& d, const GgufLoraModule* m, double scale,
                  const std::string& what) {
  for (int64_t o = 0; o < (m ? m->out : 0); ++o)
    for (int64_t i = 0; i < m->in; ++i) {
      double want = 0;
      for (int64_t r = 0; r < m->rank; ++r)
        want += scale * m->b[size_t(o * m->rank + r)] * m->a[size_t(r * m->in + i)];
      ASSERT_NEAR(d[size_t(o * m->in + i)], want, 1e-4 * (1 + std::fabs(want))) << what;
    }
  if (!m) {
    for (double x : d) ASSERT_EQ(x, 0.0) << what << ": an expert without adapter changes nothing";
  }
}

// llama.cpp applies LoRA to the stacked expert weights per chosen expert (mul_mat_id over a 3-D
// lora_a / lora_b), so per-expert adapters stack like the experts; ranks may differ (zero
// padded) and experts without an adapter are zero.
TEST(GgufLoraExportMoe, ExpertAdaptersStackWithTheSameDeltaPerExpert) {
  TempDir dir;
  const ModelConfig c = load_model_config(moe_dir("tiny_moe"));
  const std::vector<GgufLoraModule> mods = {
      random_module("model.layers.1.mlp.experts.0.up_proj", 4, 32, 16, 1),
      random_module("model.layers.1.mlp.experts.3.up_proj", 2, 32, 16, 2),
      random_module("model.layers.1.mlp.experts.15.up_proj", 4, 32, 16, 3),
      random_module("model.layers.2.mlp.experts.7.down_proj", 4, 16, 32, 4),
      random_module("model.layers.1.mlp.shared_experts.gate_proj", 4, 32, 16, 5),
      random_module("model.layers.0.mlp.up_proj", 4, 32, 64, 6),
      random_module("model.layers.2.self_attn.q_proj", 4, 32, 64, 7)};
  const double scale = 2.0;
  const auto r = export_gguf_lora(c, mods, scale, "ad", dir / "l.gguf", GgmlType::F32);
  auto f = GgufFile::open(dir / "l.gguf");
  EXPECT_EQ(f->get_string("general.architecture"), "glm4moe");
  EXPECT_EQ(r.tensors, 10);
  EXPECT_EQ(f->tensor("blk.1.ffn_up_exps.weight.lora_a").ne, (Dims{32, 4, 16}));
  EXPECT_EQ(f->tensor("blk.1.ffn_up_exps.weight.lora_b").ne, (Dims{4, 16, 16}));
  EXPECT_EQ(f->tensor("blk.2.ffn_down_exps.weight.lora_a").ne, (Dims{16, 4, 16}));
  EXPECT_EQ(f->tensor("blk.2.ffn_down_exps.weight.lora_b").ne, (Dims{4, 32, 16}));
  EXPECT_EQ(f->tensor("blk.1.ffn_gate_shexp.weight.lora_a").ne, (Dims{32, 4}));
  EXPECT_EQ(f->tensor("blk.0.ffn_up.weight.lora_b").ne, (Dims{4, 64}));
  EXPECT_EQ(f->tensor("blk.2.attn_q.weight.lora_b").ne, (Dims{4, 64}));
  for (int64_t e = 0; e < 16; ++e) {
    const GgufLoraModule* m = e == 0 ? &mods[0] : e == 3 ? &mods[1] : e == 15 ? &mods[2] : nullptr;
    expect_delta(expert_delta(*f, "blk.1.ffn_up_exps.weight", e), m, scale,
                 "blk.1 up expert " + std::to_string(e));
    expect_delta(expert_delta(*f, "blk.2.ffn_down_exps.weight", e), e == 7 ? &mods[3] : nullptr,
                 scale, "blk.2 down expert " + std::to_string(e));
  }
  bool zero_note = false, prec_note = false;
  for (const auto& n : r.notes) {
    zero_note |= n.find("written as zero") != std::string::npos;
    prec_note |= n.find("ggml_mul_mat_set_prec") != std::string::npos;
  }
  EXPECT_TRUE(zero_note);
  EXPECT_FALSE(prec_note);  // no o_proj, dense or shared down_proj adapted

  // The shared expert's down_proj goes through llama.cpp's build_ffn, which asserts on a LoRA.
  auto with_down = mods;
  with_down.push_back(random_module("model.layers.1.mlp.shared_experts.down_proj", 4, 16, 32, 8));
  const auto r2 = export_gguf_lora(c, with_down, scale, "ad", dir / "d.gguf", GgmlType::F32);
  prec_note = false;
  for (const auto& n : r2.notes)
    prec_note |= n.find("shared_experts.down_proj") != std::string::npos;
  EXPECT_TRUE(prec_note);

  expect_error(
      [&] {
        export_gguf_lora(c, {random_module("model.layers.1.mlp.experts.16.up_proj", 4, 32, 16, 1)},
                         scale, "x", dir / "bad.gguf", GgmlType::F32);
      },
      "'model.layers.1.mlp.experts.16.up_proj' is not an expert of this model");
  expect_error(
      [&] {
        export_gguf_lora(c, {random_module("model.layers.1.mlp.experts.2.up_proj", 4, 64, 16, 1)},
                         scale, "x", dir / "bad.gguf", GgmlType::F32);
      },
      "another model");
}

}  // namespace
}  // namespace glm4
