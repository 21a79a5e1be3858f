// Loading mlx-lm's glm4_moe_lite conversions (stacked experts, kv_b_proj split into embed_q /
// unembed_out, dense or mlx-quantized): the same logits as the transformers layout, and the
// broken splits named.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "autograd/node.h"
#include "io/safetensors.h"
#include "model/glm4_model.h"
#include "model/key_layout.h"
#include "tests/support/edited_model_copy.h"
#include "tests/support/expect_error.h"
#include "tests/support/fixture_logits.h"
#include "tests/support/lite_mlx_convert.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

namespace fs = std::filesystem;
const fs::path kLite = fs::path(GLM4_TEST_DATA) / "moe_lite" / "tiny_lite";
const std::string kAttn1 = "model.layers.1.self_attn";

std::vector<float> logits_of(const Glm4Model& m) { return testing::short_prompt_logits(m); }

// Fails unless f throws glm4::Error whose message holds every one of `parts`.
void expect_message(const std::function<void()>& f, const std::vector<std::string>& parts) {
  const std::string msg = testing::error_of(f);
  for (const std::string& p : parts)
    EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg << "\nexpected: " << p;
}

const Param& kv_b_of(Glm4Model& m, int layer) {
  const Param* found = nullptr;
  m.visit([&](const std::string& n, Param& p) {
    if (n == "model.layers." + std::to_string(layer) + ".self_attn.kv_b_proj.weight") found = &p;
  });
  return *found;
}

using Edited = testing::EditedTensor;
void copy_model(const fs::path& from, const fs::path& out, const std::function<bool(Edited&)>& edit,
                std::vector<Edited> extra = {}) {
  testing::copy_model_edited(from, out, edit, std::move(extra));
}

// tiny_lite in fp32 and a wider random model in bf16 (f16 too): mlx-lm's dense layout has no
// kv_b_proj, no MTP layer and stacked experts, and loads to the transformers layout's logits
// bit for bit, kv_b_proj rebuilt exactly.
TEST(MoeLiteMlxLoad, DenseConversionIsBitIdentical) {
  testing::TempDir tmp;
  testing::write_lite_mlx(kLite, tmp / "mlx");
  auto file = SafetensorsFile::open(tmp / "mlx" / "model.safetensors");
  EXPECT_EQ(file->find(kAttn1 + ".kv_b_proj.weight"), nullptr);
  EXPECT_EQ(file->at(kAttn1 + ".embed_q.weight").shape, (std::vector<int64_t>{4, 16, 8}));
  EXPECT_EQ(file->at(kAttn1 + ".unembed_out.weight").shape, (std::vector<int64_t>{4, 10, 16}));
  EXPECT_EQ(file->at("model.layers.2.mlp.switch_mlp.down_proj.weight").shape,
            (std::vector<int64_t>{16, 32, 16}));
  EXPECT_EQ(file->find("model.layers.3.input_layernorm.weight"), nullptr);
  auto hf = load_model(kLite), mlx = load_model(tmp / "mlx");
  EXPECT_EQ(logits_of(*hf), logits_of(*mlx));
  for (int layer : {0, 1, 2}) {
    EXPECT_EQ(kv_b_of(*mlx, layer).frozen.dtype(), DType::F32);
    EXPECT_EQ(kv_b_of(*mlx, layer).to_f32().to_vector(), kv_b_of(*hf, layer).to_f32().to_vector());
  }
  EXPECT_EQ(mlx->loaded.rebuilt_bytes, size_t(3 * 72 * 16 * 4));
  EXPECT_NE(mlx->loaded.describe().find("kv_b_proj rebuilt dense from embed_q / unembed_out"),
            std::string::npos)
      << mlx->loaded.describe();
  EXPECT_EQ(hf->loaded.describe().find("kv_b_proj"), std::string::npos);
  EXPECT_EQ(mlx->loaded.fields()["rebuilt_bytes"], 3 * 72 * 16 * 4);

  for (DType dtype : {DType::BF16, DType::F16}) {
    const fs::path wide = tmp / dtype_name(dtype),
                   out = tmp / (std::string("mlx_") + dtype_name(dtype));
    testing::write_wide_lite(kLite, wide, dtype);
    testing::write_lite_mlx(wide, out);
    auto a = load_model(wide), b = load_model(out);
    EXPECT_EQ(logits_of(*a), logits_of(*b)) << dtype_name(dtype);
    EXPECT_EQ(kv_b_of(*b, 2).frozen.dtype(), dtype);
    EXPECT_EQ(kv_b_of(*b, 2).to_f32().to_vector(), kv_b_of(*a, 2).to_f32().to_vector());
  }
}

// Read into 2 MB pages (files of a few MB: a vocabulary of 65536), the halves' pages are given
// back once kv_b_proj is rebuilt; nothing else the model reads may lose its bytes, so the logits
// stay those of the transformers layout (dense) and of the same codes (4 bits).
TEST(MoeLiteMlxLoad, HugePageLoadsGiveTheHalvesBackAndKeepEverythingElse) {
  testing::TempDir tmp;
  nlohmann::json j = nlohmann::json::parse(std::ifstream(kLite / "config.json"));
  j["vocab_size"] = 65536;
  fs::create_directories(tmp / "like");
  std::ofstream(tmp / "like" / "config.json") << j.dump(2);
  testing::write_wide_lite(tmp / "like", tmp / "wide", DType::BF16);
  testing::write_lite_mlx(tmp / "wide", tmp / "mlx");
  testing::write_lite_mlx(tmp / "wide", tmp / "mlx4", QuantFormat{4, 32}, tmp / "oracle4");
  for (const char* dir : {"mlx", "mlx4"})
    ASSERT_GE(fs::file_size(tmp / dir / "model.safetensors"), size_t(2) << 20) << dir;
  auto mlx = load_model(tmp / "mlx", FileResidency::kHugePages);
  EXPECT_EQ(mlx->loaded.residency, FileResidency::kHugePages);
  EXPECT_EQ(logits_of(*mlx), logits_of(*load_model(tmp / "wide", FileResidency::kMapped)));
  auto mlx4 = load_model(tmp / "mlx4", FileResidency::kHugePages);
  EXPECT_EQ(mlx4->loaded.residency, FileResidency::kHugePages);
  EXPECT_EQ(logits_of(*mlx4), logits_of(*load_model(tmp / "oracle4", FileResidency::kMapped)));
}

// 3, 4, 6 and 8 bits: each half re-quantized along its own last axis (embed_q's groups along nope),
// the other matrices and the stacked experts quantized. kv_b_proj is held dense in the scales'
// dtype (bf16) with the values mlx dequantizes the halves to, so the logits are those of the
// transformers layout with that kv_b_proj and the same codes everywhere else.
TEST(MoeLiteMlxLoad, QuantizedConversionEqualsItsDequantizedSplit) {
  testing::TempDir tmp;
  testing::write_wide_lite(kLite, tmp / "wide", DType::BF16);
  for (int bits : {3, 4, 6, 8}) {
    const fs::path mlx = tmp / ("mlx" + std::to_string(bits)),
                   oracle = tmp / ("oracle" + std::to_string(bits));
    testing::write_lite_mlx(tmp / "wide", mlx, QuantFormat{bits, 32}, oracle);
    auto file = SafetensorsFile::open(mlx / "model.safetensors");
    EXPECT_EQ(file->at(kAttn1 + ".embed_q.weight").shape,
              (std::vector<int64_t>{4, 64, 32 * bits / 32}));
    EXPECT_EQ(file->at(kAttn1 + ".embed_q.scales").shape, (std::vector<int64_t>{4, 64, 1}));
    EXPECT_EQ(file->at(kAttn1 + ".unembed_out.scales").shape, (std::vector<int64_t>{4, 32, 2}));
    EXPECT_EQ(file->at(kAttn1 + ".unembed_out.scales").dtype, "BF16");
    auto a = load_model(oracle), b = load_model(mlx), dense = load_model(tmp / "wide");
    EXPECT_EQ(logits_of(*a), logits_of(*b)) << bits;
    const Param& kv_b = kv_b_of(*b, 1);
    EXPECT_FALSE(kv_b.frozen.is_quantized());
    EXPECT_EQ(kv_b.frozen.dtype(), DType::BF16);
    EXPECT_EQ(kv_b.to_f32().to_vector(), kv_b_of(*a, 1).to_f32().to_vector());
    EXPECT_NE(kv_b.to_f32().to_vector(), kv_b_of(*dense, 1).to_f32().to_vector());  // lossy
    const MoeBlock& moe = std::get<MoeBlock>(b->layers[2].mlp);
    EXPECT_TRUE(moe.experts[3].gate_proj.weight.frozen.is_quantized());
    EXPECT_FALSE(moe.experts[3].gate_proj.weight.frozen.owns_buffer());
    EXPECT_EQ(b->loaded.rebuilt_bytes, size_t(3 * 4 * 64 * 64 * 2));
  }
  // config.json may name the halves as mlx-lm names their modules (per-module overrides).
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(tmp / "mlx4" / "config.json"));
  cfg["quantization"][kAttn1 + ".embed_q"] = {{"group_size", 32}, {"bits", 4}};
  cfg["quantization"][kAttn1 + ".unembed_out"] = true;
  std::ofstream(tmp / "mlx4" / "config.json") << cfg.dump(2);
  EXPECT_EQ(logits_of(*load_model(tmp / "mlx4")), logits_of(*load_model(tmp / "oracle4")));
  cfg["quantization"][kAttn1 + ".embed_q"] = {{"group_size", 32}, {"bits", 8}};
  std::ofstream(tmp / "mlx4" / "config.json") << cfg.dump(2);
  expect_message([&] { load_model(tmp / "mlx4"); }, {kAttn1 + ".embed_q"});
}

// Stacked experts with kv_b_proj kept whole (the glm4_moe layout of mlx-lm, without the split)
// load as well.
TEST(MoeLiteMlxLoad, StackedExpertsWithWholeKvB) {
  testing::TempDir tmp;
  testing::write_lite_mlx(kLite, tmp / "mlx");
  auto hf = SafetensorsFile::open(kLite / "model.safetensors");
  std::vector<Edited> whole;
  for (int layer : {0, 1, 2}) {
    const TensorInfo& t =
        hf->at("model.layers." + std::to_string(layer) + ".self_attn.kv_b_proj.weight");
    whole.push_back(testing::edited_tensor(t));
  }
  copy_model(
      tmp / "mlx", tmp / "whole", [](Edited& e) { return !is_split_kv_b_key(e.name); }, whole);
  auto a = load_model(kLite), b = load_model(tmp / "whole");
  EXPECT_EQ(logits_of(*a), logits_of(*b));
  EXPECT_EQ(b->loaded.rebuilt_bytes, 0u);
}

TEST(MoeLiteMlxLoad, BrokenSplitsAreNamed) {
  testing::TempDir tmp;
  testing::write_lite_mlx(kLite, tmp / "mlx");
  const fs::path mlx = tmp / "mlx";
  // One half without the other, either way.
  for (const auto& [kept, dropped] : std::vector<std::pair<std::string, std::string>>{
           {"embed_q", "unembed_out"}, {"unembed_out", "embed_q"}}) {
    const fs::path out = tmp / ("no_" + dropped);
    copy_model(mlx, out, [&](Edited& e) { return e.name != kAttn1 + "." + dropped + ".weight"; });
    expect_message([&] { load_model(out); },
                   {out.string(), kAttn1 + "." + kept + ".weight is present but " + kAttn1 + "." +
                                      dropped + ".weight is not"});
  }
  // Neither half: kv_b_proj is reported missing with the split's names.
  copy_model(mlx, tmp / "neither", [&](Edited& e) {
    return e.name.find(kAttn1 + ".embed_q") == std::string::npos &&
           e.name.find(kAttn1 + ".unembed_out") == std::string::npos;
  });
  expect_message(
      [&] { load_model(tmp / "neither"); },
      {"missing keys (1)", kAttn1 + ".kv_b_proj.weight (or " + kAttn1 + ".embed_q.weight and " +
                               kAttn1 + ".unembed_out.weight)"});
  // A half in the layout of the other: (4, 8, 16) where config.json gives (4, 16, 8).
  copy_model(mlx, tmp / "shape", [&](Edited& e) {
    if (e.name == kAttn1 + ".embed_q.weight") e.shape = {4, 8, 16};
    return true;
  });
  expect_message([&] { load_model(tmp / "shape"); },
                 {(tmp / "shape").string(), kAttn1 + ".embed_q.weight has shape (4,8,16)",
                  "expected (4,16,8)"});
  // kv_b_proj and its split side by side.
  auto hf = SafetensorsFile::open(kLite / "model.safetensors");
  const TensorInfo& kv_b = hf->at(kAttn1 + ".kv_b_proj.weight");
  copy_model(mlx, tmp / "both", [](Edited&) { return true; }, {testing::edited_tensor(kv_b)});
  expect_message(
      [&] { load_model(tmp / "both"); },
      {(tmp / "both").string(), kAttn1 + ".kv_b_proj.weight and mlx-lm's split", "both present"});
  // kv_b_proj whole in a layer of a file whose other layers hold the split.
  copy_model(mlx, tmp / "whole",
             [&](Edited& e) {
               return e.name.find(kAttn1 + ".embed_q") == std::string::npos &&
                      e.name.find(kAttn1 + ".unembed_out") == std::string::npos;
             },
             {testing::edited_tensor(kv_b)});
  expect_message([&] { load_model(tmp / "whole"); },
                 {(tmp / "whole").string(), kAttn1 + ".kv_b_proj.weight is stored whole while"});
  // Halves of two dtypes.
  copy_model(mlx, tmp / "dtypes", [&](Edited& e) {
    if (e.name != kAttn1 + ".embed_q.weight") return true;
    std::vector<std::byte> half(e.bytes.size() / 2);
    for (size_t i = 0; i < half.size() / 2; ++i) {
      float f;
      std::memcpy(&f, &e.bytes[4 * i], 4);
      const uint16_t h = f32_to_bf16(f);
      std::memcpy(&half[2 * i], &h, 2);
    }
    e.bytes = std::move(half);
    e.dtype = "BF16";
    return true;
  });
  expect_message([&] { load_model(tmp / "dtypes"); },
                 {kAttn1 + ".embed_q holds BF16 values but", "holds F32"});
  // The split in a model whose config.json has no latent attention.
  const fs::path moe = fs::path(GLM4_TEST_DATA) / "moe" / "tiny_moe";
  auto mlx_file = SafetensorsFile::open(mlx / "model.safetensors");
  const TensorInfo& eq = mlx_file->at(kAttn1 + ".embed_q.weight");
  copy_model(moe, tmp / "glm4_moe", [](Edited&) { return true; }, {testing::edited_tensor(eq)});
  expect_message(
      [&] { load_model(tmp / "glm4_moe"); },
      {kAttn1 + ".embed_q.weight is mlx-lm's glm4_moe_lite split of kv_b_proj", "glm4_moe model"});
}

}  // namespace
}  // namespace glm4
