// Quantized models as mlx writes them: loading with per-module overrides and `false`, bad
// inputs rejected by name, saving bit for bit, quantize == init --bits, and the measured merge
// of an adapter onto a quantized base (the delta that naive re-quantization erases).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "autograd/kernels/quant_linear.h"
#include "autograd/node.h"
#include "base/check.h"
#include "infer/merge_quantized.h"
#include "io/file/json_file.h"
#include "io/model_files.h"
#include "io/safetensors.h"
#include "model/compute_choice.h"
#include "model/quant_plan.h"
#include "model/save.h"
#include "support/temp_dir.h"
#include "tests/support/fixture_logits.h"
#include "tests/support/random_adapter.h"

namespace glm4 {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::throws_with;

const fs::path kQuant = fs::path(GLM4_TEST_DATA) / "tiny_glm4_q";

std::vector<float> logits_of(const Glm4Model& model) {
  return testing::fixture_batch_logits(model, (kQuant / "fixture.safetensors").string());
}
using testing::max_relative_error;

// A copy of tiny_glm4_q whose tensors and config.json `edit` may change.
fs::path edited_copy(
    const TempDir& tmp,
    const std::function<void(std::map<std::string, TensorToWrite>&,
                             std::vector<std::vector<uint8_t>>&, nlohmann::json&)>& edit) {
  const fs::path dir = tmp / "edited";
  fs::create_directories(dir);
  auto file = SafetensorsFile::open(kQuant / "model.safetensors");
  std::map<std::string, TensorToWrite> tensors;
  for (const TensorInfo& t : file->tensors())
    tensors[t.name] = {t.name, t.dtype, t.shape, t.data, t.nbytes};
  std::vector<std::vector<uint8_t>> owned;
  owned.reserve(16);
  nlohmann::json config = read_json_file(kQuant / "config.json");
  edit(tensors, owned, config);
  std::vector<TensorToWrite> list;
  for (auto& [k, t] : tensors) list.push_back(t);
  write_safetensors(dir / "model.safetensors", list);
  std::ofstream(dir / "config.json") << config.dump(2);
  return dir;
}

TEST(QuantizedModel, LoadsMlxLayoutWithOverridesAndFalse) {
  auto model = load_model(kQuant);
  ASSERT_TRUE(model->config.quantization.has_value());
  EXPECT_EQ(model->config.quantization->format, (QuantFormat{4, 64}));
  std::map<std::string, std::string> got;
  model->visit([&](const std::string& name, Param& p) {
    if (!p.is_matrix()) return;
    const Weight& w = p.frozen;
    got[name] = w.is_quantized()
                    ? std::to_string(w.quant().bits) + "/" + std::to_string(w.quant().group_size) +
                          " " + dtype_name(w.dtype())
                    : std::string("dense ") + dtype_name(w.dtype());
  });
  EXPECT_EQ(got["model.embed_tokens.weight"], "4/64 BF16");
  EXPECT_EQ(got["model.layers.0.self_attn.q_proj.weight"], "4/64 BF16");
  EXPECT_EQ(got["model.layers.0.mlp.down_proj.weight"], "8/32 BF16");
  EXPECT_EQ(got["model.layers.1.mlp.down_proj.weight"], "4/32 BF16");
  EXPECT_EQ(got["model.layers.1.self_attn.o_proj.weight"], "3/64 BF16");
  EXPECT_EQ(got["lm_head.weight"], "dense BF16");
}

TEST(QuantizedModel, BadInputsAreRejectedByName) {
  const std::string q = "model.layers.0.self_attn.q_proj";
  auto expect = [&](const char* what, std::vector<std::string> parts, auto edit) {
    TempDir tmp;
    const fs::path dir = edited_copy(tmp, edit);
    EXPECT_TRUE(throws_with([&] { load_model(dir); }, parts)) << what;
  };
  expect("wrong packed shape", {q, "[64, 7]", "in_features 56"}, [&](auto& t, auto&, auto&) {
    t[q + ".weight"].shape = {64, 7};
    t[q + ".weight"].nbytes = 64 * 7 * 4;
  });
  expect("missing biases", {"missing keys", q + ".biases"},
         [&](auto& t, auto&, auto&) { t.erase(q + ".biases"); });
  expect("group size not dividing in",
         {"model.layers.1.mlp.down_proj", "group_size 64", "in_features 160"},
         [&](auto&, auto&, nlohmann::json& c) {
           c["quantization"]["model.layers.1.mlp.down_proj"] = {{"group_size", 64}, {"bits", 4}};
         });
  expect("another width than the file's", {"model.layers.0.mlp.down_proj", "64 x 320", "(64,160)"},
         [&](auto&, auto&, nlohmann::json& c) {
           c["quantization"].erase("model.layers.0.mlp.down_proj");
         });
  expect("bits out of range", {"quantization", "bits is 7"},
         [&](auto&, auto&, nlohmann::json& c) { c["quantization"]["bits"] = 7; });
  expect("mode", {"quantization", "mxfp4", "affine"},
         [&](auto&, auto&, nlohmann::json& c) { c["quantization"]["mode"] = "mxfp4"; });
  expect("override of a missing module", {"model.layers.5.mlp.up_proj", "not a matrix"},
         [&](auto&, auto&, nlohmann::json& c) {
           c["quantization"]["model.layers.5.mlp.up_proj"] = false;
         });
  expect("scales without a quantization section", {"scales", "no \"quantization\""},
         [&](auto&, auto&, nlohmann::json& c) {
           c.erase("quantization");
           c.erase("quantization_config");
         });
  expect("false for a module stored quantized",
         {"model.embed_tokens.weight", "U32", "does not quantize"},
         [&](auto&, auto&, nlohmann::json& c) { c["quantization"]["model.embed_tokens"] = false; });
  expect("a dense module said to be quantized",
         {"missing keys", "lm_head.scales", "lm_head.biases"},
         [&](auto&, auto&, nlohmann::json& c) {
           c["quantization"]["lm_head"] = nlohmann::json::object();
         });
  expect("another quant_method", {"quantization_config", "gptq"},
         [&](auto&, auto&, nlohmann::json& c) {
           c.erase("quantization");
           c["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}};
         });
}

TEST(QuantizedModel, QuantizationConfigAloneIsRead) {
  TempDir tmp;
  const fs::path dir =
      edited_copy(tmp, [](auto&, auto&, nlohmann::json& c) { c.erase("quantization"); });
  EXPECT_EQ(load_model(dir)->config.quantization, load_model(kQuant)->config.quantization);
}

TEST(QuantizedModel, SavedFilesAreTheSameBytesAndTheSameConfigKeys) {
  auto model = load_model(kQuant);
  TempDir tmp;
  save_model(*model, model->config, tmp.path(), DType::BF16);
  auto a = SafetensorsFile::open(kQuant / "model.safetensors");
  auto b = SafetensorsFile::open(tmp / "model.safetensors");
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (const TensorInfo& t : a->tensors()) {
    const TensorInfo& s = b->at(t.name);
    EXPECT_EQ(s.dtype, t.dtype) << t.name;
    EXPECT_EQ(s.shape, t.shape) << t.name;
    ASSERT_EQ(s.nbytes, t.nbytes) << t.name;
    EXPECT_EQ(std::memcmp(s.data, t.data, t.nbytes), 0) << t.name;
  }
  nlohmann::json written = read_json_file(tmp / "config.json"),
                 original = read_json_file(kQuant / "config.json");
  EXPECT_EQ(written["quantization"], original["quantization"]);
  EXPECT_EQ(written["quantization_config"], original["quantization"]);
  EXPECT_EQ(load_model(tmp.path())->config, model->config);
}

TEST(QuantizedModel, DequantizedSaveEqualsTheQuantizedModel) {
  auto model = load_model(kQuant);
  TempDir tmp;
  SaveOptions o;
  o.dtype = DType::F32;
  o.dequantize = true;
  save_model(*model, model->config, tmp.path(), o);
  auto dense = load_model(tmp.path());
  EXPECT_FALSE(dense->config.quantization.has_value());
  EXPECT_FALSE(read_json_file(tmp / "config.json").contains("quantization_config"));
  EXPECT_LE(max_relative_error(logits_of(*dense), logits_of(*model)), 1e-5);
}

// glm4 quantize (a bf16 model rewritten) and init --bits (each matrix generated then quantized)
// give the same files, bit for bit, and the plan's rules land where they say.
TEST(QuantizedModel, QuantizeEqualsInitBits) {
  ModelConfig config = load_model_config(fs::path(GLM4_TEST_DATA) / "tiny_glm4");
  const QuantPlan plan = QuantPlan::parse(
      {4, 64}, {"lm_head:8", "down_proj:6/32", "layers.1.mlp.gate_up_proj:none"}, "--keep");
  TempDir tmp;
  Glm4Model dense(config);
  init_random(dense, 7, DType::BF16);
  SaveOptions o;
  o.dtype = DType::BF16;
  o.quantize = [&](const std::string& m, const Param& p) { return plan.format_for(m, p.shape[1]); };
  save_model(dense, config, tmp / "quantized", o);
  Glm4Model empty(config);
  o.source = [&](const std::string& name, const Param& p) {
    return random_param(config, 7, name, p.shape, DType::BF16);
  };
  o.max_shard_bytes = 40000;
  save_model(empty, config, tmp / "init", o);
  ModelFiles a = ModelFiles::open(tmp / "quantized"), b = ModelFiles::open(tmp / "init");
  ASSERT_EQ(a.keys(), b.keys());
  for (const std::string& k : a.keys()) {
    ASSERT_EQ(a.at(k).nbytes, b.at(k).nbytes) << k;
    EXPECT_EQ(std::memcmp(a.at(k).data, b.at(k).data, a.at(k).nbytes), 0) << k;
  }
  auto model = load_model(tmp / "init");
  EXPECT_EQ(model->lm_head->weight.frozen.quant().bits, 8);
  EXPECT_EQ(std::get<Glm4Mlp>(model->layers[0].mlp).down_proj.weight.frozen.quant().format(),
            (QuantFormat{6, 32}));
  EXPECT_FALSE(std::get<Glm4Mlp>(model->layers[1].mlp).gate_up_proj.weight.frozen.is_quantized());
  EXPECT_EQ(std::get<Glm4Mlp>(model->layers[0].mlp).gate_up_proj.weight.frozen.quant().format(),
            (QuantFormat{4, 64}));
  // Close to the dense model it came from (4 bits on random weights: a loose bound).
  EXPECT_LE(max_relative_error(logits_of(*model), logits_of(dense)), 0.5);
}

TEST(QuantPlan, ParsesRulesAndRejectsBadOnes) {
  const QuantPlan plan = QuantPlan::parse(
      {4, 64}, {"lm_head:8", "mlp.down_proj:3/32", "layers.0.mlp.down_proj:none"}, "--keep");
  EXPECT_EQ(plan.format_for("lm_head", 64), (QuantFormat{8, 64}));
  EXPECT_EQ(plan.format_for("model.layers.1.mlp.down_proj", 160), (QuantFormat{3, 32}));
  EXPECT_EQ(plan.format_for("model.layers.0.mlp.down_proj", 160), std::nullopt);
  EXPECT_EQ(plan.format_for("model.layers.0.self_attn.q_proj", 64), (QuantFormat{4, 64}));
  EXPECT_EQ(plan.format_for("model.layers.0.self_attn.q_proj", 96),
            std::nullopt);  // 64 does not divide 96
  EXPECT_FALSE(QuantPlan::matches("proj", "model.layers.0.self_attn.q_proj"));
  EXPECT_TRUE(throws_with(
      [] {
        QuantPlan::parse({4, 64}, {"lm_head"}, "--keep");
      },
      {"--keep", "lm_head", "PATTERN:BITS"}));
  EXPECT_TRUE(throws_with(
      [] {
        QuantPlan::parse({4, 64}, {"lm_head:7"}, "--keep");
      },
      {"--keep", "lm_head:7", "bits 7"}));
  EXPECT_TRUE(throws_with(
      [] {
        QuantPlan::parse({4, 64}, {"lm_head:8/48"}, "--keep");
      },
      {"lm_head:8/48", "group size 48"}));
  EXPECT_TRUE(throws_with(
      [] {
        QuantPlan::parse({4, 64}, {"lm_head:x"}, "--keep");
      },
      {"lm_head:x", "not a number"}));
}

// Adapters on every linear of the quantized tiny model, B random with standard deviation `b_std`.
void add_lora(Glm4Model& model, float b_std) {
  LoraConfig lora;
  lora.rank = 4;
  lora.alpha = 8;
  lora.targets = {"all-linear"};
  model.add_lora(lora, 11);
  testing::randomize_lora_b(model, 3, b_std);
}

// A small delta (what a short fine-tune leaves): re-quantizing at the base's 4 bits keeps
// almost none of it; the merge raises those modules, and --keep-bits writes them measured as lossy.
TEST(QuantizedMerge, NaiveRequantizationErasesASmallDeltaSoBitsAreRaised) {
  auto model = load_model(kQuant);
  add_lora(*model, 2e-4f);
  const std::vector<float> live = logits_of(*model);
  RequantizeOptions o;
  o.dtype = DType::BF16;
  std::vector<ModuleMerge> merges = merge_requantized(*model, o);
  ASSERT_EQ(merges.size(), 12u);  // every quantized linear; lm_head is dense and merges exactly
  int raised = 0;
  for (const ModuleMerge& m : merges) {
    if (m.base.bits == 4) {
      EXPECT_LT(m.kept_at_base, 0.3) << m.path;  // the erasure the issue is about
    }
    EXPECT_GE(m.kept, 0.5) << m.path;
    EXPECT_FALSE(m.lossy()) << m.path;
    raised += m.written && m.written->bits > m.base.bits;
  }
  EXPECT_GE(raised, 8);
  const std::string report = describe_merge(merges);
  EXPECT_NE(report.find("raised"), std::string::npos) << report;
  EXPECT_EQ(model->lora_parameters().size(), 0u);

  auto naive = load_model(kQuant);
  add_lora(*naive, 2e-4f);
  o.keep_bits = true;
  std::vector<ModuleMerge> lossy = merge_requantized(*naive, o);
  int flagged = 0;
  for (const ModuleMerge& m : lossy) {
    EXPECT_EQ(m.written, m.base) << m.path;
    flagged += m.lossy();
  }
  EXPECT_GE(flagged, 8);
  EXPECT_NE(describe_merge(lossy).find("LOSSY"), std::string::npos);
  // What the naive merge writes behaves like the base: the adapter's change is gone.
  auto base = load_model(kQuant);
  const std::vector<float> before = logits_of(*base);
  EXPECT_LT(max_relative_error(logits_of(*naive), before), 0.2 * max_relative_error(live, before));
}

// raise_bits limits the widths tried: {8} keeps every module on the int8 kernels' widths (or
// dense), where the default ladder takes 5 or 6 bits for some of the same modules.
TEST(QuantizedMerge, RaiseBitsLimitsTheWidthsTried) {
  auto count_widths = [](const std::vector<int>& raise_bits, int* five_or_six, int* eight) {
    auto model = load_model(kQuant);
    add_lora(*model, 2e-4f);
    RequantizeOptions o;
    o.dtype = DType::BF16;
    o.raise_bits = raise_bits;
    *five_or_six = *eight = 0;
    for (const ModuleMerge& m : merge_requantized(*model, o)) {
      EXPECT_FALSE(m.lossy()) << m.path;
      if (!m.written || m.written->bits == m.base.bits) continue;
      *five_or_six += m.written->bits == 5 || m.written->bits == 6;
      *eight += m.written->bits == 8;
    }
  };
  int five_or_six = 0, eight = 0;
  count_widths({5, 6, 8}, &five_or_six, &eight);
  EXPECT_GE(five_or_six, 4);
  count_widths({8}, &five_or_six, &eight);
  EXPECT_EQ(five_or_six, 0);
  EXPECT_GE(eight, 4);
}

TEST(QuantizedMerge, LargeDeltaSurvivesAtTheBaseBits) {
  auto model = load_model(kQuant);
  add_lora(*model, 0.03f);
  RequantizeOptions o;
  for (const ModuleMerge& m : merge_requantized(*model, o)) {
    EXPECT_EQ(m.written, m.base) << m.path;
    EXPECT_GT(m.kept, 0.7) << m.path;
  }
}

TEST(QuantizedModel, Bf16ComputeRunsTheQuantizedPrefillOnBf16Units) {
  auto model = load_model(kQuant);
  const std::vector<float> f32 = logits_of(*model);
  try {
    if (!apply_compute_flag(*model, "bf16").bf16_units_on())
      GTEST_SKIP() << "no native bf16 on this CPU: bf16 compute runs the prefill on fp32";
  } catch (const Error& e) {
    GTEST_SKIP() << "no native bf16 on this CPU: " << e.what();
  }
  const std::vector<float> bf16 = logits_of(*model);
  const double err = max_relative_error(bf16, f32);
  EXPECT_GT(err, 0.0);  // activations were rounded: the bf16 kernels ran
  EXPECT_LE(err, 3e-2);
}

// Where no bf16 units take it (kernel none: an AVX512-VNNI or AVX2 CPU without AVX512-BF16), the
// 320-row prefill of bf16 compute runs on the int8 GEMM: X in two int8 levels, far closer to fp32
// than bf16 is.
TEST(QuantizedModel, Bf16ComputeWithoutBf16UnitsRunsThePrefillOnInt8) {
  if (!quant_int8_available()) GTEST_SKIP() << "no int8 kernels here (scalar quantized kernels)";
  auto model = load_model(kQuant);
  const std::vector<float> f32 = logits_of(*model);
  model->compute = bf16_compute(kernels::Bf16Kernel::kNone);
  const std::vector<float> int8 = logits_of(*model);
  const double err = max_relative_error(int8, f32);
  EXPECT_GT(err, 0.0);  // X was written in int8 levels: the int8 kernels ran
  EXPECT_LE(err, 1e-3);
}

TEST(QuantizedModel, AutoComputePicksBf16ForBf16Scales) {
  auto model = load_model(kQuant);
  const ComputeChoice c = apply_compute_flag(*model, "auto");
  EXPECT_EQ(model->compute.dtype, c.dtype);
  if (kernels::bf16_kernel() != kernels::Bf16Kernel::kNone) {
    EXPECT_EQ(c.dtype, ComputeDType::BF16);
  }
}

}  // namespace
}  // namespace glm4
