// Loading glm4_moe checkpoints: the multi-token-prediction layer in the files is skipped (its
// values never matter), and a missing expert, a wrong expert count or shape in either layout is
// an error naming the key. glm4 init's random model is written in the per-expert layout and
// reads back the same.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "autograd/node.h"
#include "io/safetensors.h"
#include "model/glm4_model.h"
#include "model/save.h"
#include "tests/support/edited_model_copy.h"
#include "tests/support/expect_error.h"
#include "tests/support/fixture_logits.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

namespace fs = std::filesystem;
std::string moe_dir(const std::string& name) {
  return std::string(GLM4_TEST_DATA) + "/moe/" + name;
}

// A copy of fixture `name` whose tensors went through `edit` (return false to drop one; it may
// change the name, shape and bytes).
using Edited = testing::EditedTensor;
void copy_model(const std::string& name, const fs::path& out,
                const std::function<bool(Edited&)>& edit) {
  testing::copy_model_edited(moe_dir(name), out, edit);
}

std::vector<float> logits_of(const Glm4Model& m) { return testing::short_prompt_logits(m); }

// The MTP layer (model.layers.3.*: a whole decoder layer, enorm, hnorm, eh_proj, shared_head)
// is in the files and skipped: NaN in all of it leaves the logits bit for bit.
TEST(MoeLoad, MultiTokenPredictionLayerIsSkipped) {
  testing::TempDir tmp;
  int64_t poisoned = 0;
  copy_model("tiny_moe", tmp.path(), [&](Edited& e) {
    if (e.name.rfind("model.layers.3.", 0) == 0 && e.dtype == "F32") {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      for (size_t i = 0; i + 4 <= e.bytes.size(); i += 4) std::memcpy(e.bytes.data() + i, &nan, 4);
      ++poisoned;
    }
    return true;
  });
  EXPECT_EQ(poisoned, 70);
  EXPECT_EQ(logits_of(*load_model(tmp.path())), logits_of(*load_model(moe_dir("tiny_moe"))));
}

TEST(MoeLoad, MissingExpertIsNamed) {
  testing::TempDir tmp;
  copy_model("tiny_moe", tmp.path(),
             [](Edited& e) { return e.name != "model.layers.2.mlp.experts.9.up_proj.weight"; });
  testing::expect_error([&] { load_model(tmp.path()); },
                        "missing keys (1):\n  model.layers.2.mlp.experts.9.up_proj.weight");
}

// One expert too few in the files (config says 16): the missing expert's keys are named; one
// too many: the extra expert's keys are unexpected.
TEST(MoeLoad, WrongExpertCountIsNamed) {
  testing::TempDir tmp;
  const fs::path fewer = tmp / "fewer", more = tmp / "more";
  copy_model("tiny_moe", fewer,
             [](Edited& e) { return e.name.find(".mlp.experts.15.") == std::string::npos; });
  testing::expect_error([&] { load_model(fewer); },
                        "model.layers.1.mlp.experts.15.down_proj.weight");
  copy_model("tiny_moe", more, [](Edited&) { return true; });
  {
    auto file = SafetensorsFile::open(more / "model.safetensors");
    std::vector<Edited> all;
    for (const TensorInfo& t : file->tensors()) all.push_back(testing::edited_tensor(t));
    const TensorInfo& extra = file->at("model.layers.1.mlp.experts.0.gate_proj.weight");
    all.push_back(testing::edited_tensor(extra));
    all.back().name = "model.layers.1.mlp.experts.16.gate_proj.weight";
    std::vector<TensorToWrite> w;
    for (const Edited& e : all)
      w.push_back({e.name, e.dtype, e.shape, e.bytes.data(), e.bytes.size()});
    file.reset();
    write_safetensors(more / "model.safetensors", w);
  }
  testing::expect_error([&] { load_model(more); },
                        "unexpected keys (1):\n  model.layers.1.mlp.experts.16.gate_proj.weight");
}

TEST(MoeLoad, WrongExpertShapeIsNamed) {
  testing::TempDir tmp;
  copy_model("tiny_moe", tmp.path(), [](Edited& e) {
    if (e.name == "model.layers.1.mlp.experts.4.down_proj.weight")
      e.shape = {16, 32};  // transposed
    return true;
  });
  testing::expect_error(
      [&] { load_model(tmp.path()); },
      "tensor model.layers.1.mlp.experts.4.down_proj.weight has shape (16,32), expected (32,16)");
}

// mlx-lm's stacked tensors: 15 experts where the config says 16 is an error naming the tensor.
TEST(MoeLoad, StackedLayoutWrongExpertCountIsNamed) {
  testing::TempDir tmp;
  fs::create_directories(tmp.path());
  copy_model("tiny_moe_mlx", tmp.path(), [](Edited& e) {
    if (e.name == "model.layers.2.mlp.switch_mlp.gate_proj.weight") {
      e.shape[0] = 15;
      e.bytes.resize(e.bytes.size() / 16 * 15);
    }
    return true;
  });
  testing::expect_error([&] { load_model(tmp.path()); },
                        "tensor model.layers.2.mlp.switch_mlp.gate_proj.weight has shape "
                        "(15,16,32), expected (16,16,32)");
}

// mlx-community's quantized conversions: each MoE layer's experts stacked into switch_mlp codes,
// scales and biases [E, out, *] (overrides in config.json named by the switch_mlp module). Read
// as row ranges, they give the per-expert quantized model's logits bit for bit.
TEST(MoeLoad, StackedQuantizedExpertsEqualThePerExpertLayout) {
  testing::TempDir tmp;
  const fs::path per_expert = tmp / "per_expert", stacked = tmp / "stacked";
  auto base = load_model(moe_dir("tiny_moe"));
  SaveOptions o;
  o.dtype = DType::BF16;
  o.quantize = [](const std::string& module, const Param& p) -> std::optional<QuantFormat> {
    if (module.ends_with(".mlp.gate") || p.shape[1] % 32 != 0)
      return std::nullopt;  // down_proj (16 inputs) stays dense
    return QuantFormat{4, 32};
  };
  save_model(*base, base->config, per_expert, o);

  fs::create_directories(stacked);
  auto file = SafetensorsFile::open(per_expert / "model.safetensors");
  std::vector<Edited> out;
  for (const TensorInfo& t : file->tensors())
    if (t.name.find(".mlp.experts.") == std::string::npos) out.push_back(testing::edited_tensor(t));
  for (int layer : {1, 2})
    for (const std::string proj : {"gate_proj", "up_proj", "down_proj"})
      for (const std::string part : {".weight", ".scales", ".biases"}) {
        const std::string first =
            "model.layers." + std::to_string(layer) + ".mlp.experts.0." + proj + part;
        if (!file->find(first)) continue;  // a dense module has no scales
        Edited e{"model.layers." + std::to_string(layer) + ".mlp.switch_mlp." + proj + part,
                 file->at(first).dtype,
                 {16},
                 {}};
        for (int64_t d : file->at(first).shape) e.shape.push_back(d);
        for (int x = 0; x < 16; ++x) {
          const TensorInfo& t = file->at("model.layers." + std::to_string(layer) + ".mlp.experts." +
                                         std::to_string(x) + "." + proj + part);
          e.bytes.insert(e.bytes.end(), t.data, t.data + t.nbytes);
        }
        out.push_back(std::move(e));
      }
  std::vector<TensorToWrite> w;
  for (const Edited& e : out)
    w.push_back({e.name, e.dtype, e.shape, e.bytes.data(), e.bytes.size()});
  write_safetensors(stacked / "model.safetensors", w);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(per_expert / "config.json"));
  nlohmann::json q = {{"group_size", 32}, {"bits", 4}};
  for (auto it = cfg["quantization"].begin(); it != cfg["quantization"].end(); ++it)
    if (it.key().find(".mlp.experts.") == std::string::npos && it.key() != "group_size" &&
        it.key() != "bits")
      q[it.key()] = it.value();
  q["model.layers.1.mlp.switch_mlp.down_proj"] = false;  // named as mlx-lm names it
  cfg["quantization"] = q;
  cfg["quantization_config"] = q;
  std::ofstream(stacked / "config.json") << cfg.dump(2);

  auto a = load_model(per_expert), b = load_model(stacked);
  EXPECT_EQ(logits_of(*a), logits_of(*b));
  const MoeBlock& moe = std::get<MoeBlock>(b->layers[2].mlp);
  EXPECT_TRUE(moe.experts[5].gate_proj.weight.frozen.is_quantized());
  EXPECT_FALSE(moe.experts[5].gate_proj.weight.frozen.owns_buffer());
  EXPECT_FALSE(moe.experts[5].down_proj.weight.frozen.is_quantized());
}

// glm4 init's path: random weights (router bias 0), written per expert in bf16 with the bias in
// F32 and no MTP layer, read back equal.
TEST(MoeLoad, InitSaveLoadRoundTrip) {
  ModelConfig c = load_model_config(moe_dir("tiny_moe"));
  Glm4Model model(c);
  init_random(model, 7, DType::BF16);
  testing::TempDir tmp;
  save_model(model, tmp.path(), DType::BF16);
  auto file = SafetensorsFile::open(tmp / "model.safetensors");
  EXPECT_EQ(file->at("model.layers.1.mlp.gate.e_score_correction_bias").dtype, "F32");
  EXPECT_EQ(file->at("model.layers.1.mlp.experts.15.down_proj.weight").dtype, "BF16");
  EXPECT_EQ(file->find("model.layers.3.eh_proj.weight"), nullptr);
  for (float v : read_f32(file->at("model.layers.2.mlp.gate.e_score_correction_bias")))
    EXPECT_EQ(v, 0.0f);
  auto back = load_model(tmp.path());
  EXPECT_EQ(back->config.num_nextn_predict_layers, 0);
  ModelConfig expected = c;
  expected.num_nextn_predict_layers = 0;
  expected.torch_dtype = DType::BF16;
  EXPECT_EQ(back->config, expected);
  EXPECT_EQ(logits_of(*back), logits_of(model));
}

}  // namespace
}  // namespace glm4
