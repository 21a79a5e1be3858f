// mlx-lm's adapter layout for glm4_moe and glm4_moe_lite: routed experts stacked as
// LoRASwitchLinear (switch_mlp lora_a [experts, r, in], lora_b [experts, out, r]), the other
// linears as LoRALinear; conversion both ways bit for bit, the same logits as the PEFT form, and
// errors naming the key of a bad file.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "autograd/node.h"
#include "io/safetensors.h"
#include "model/adapter/adapter_files.h"
#include "model/adapter/adapter_io.h"
#include "model/glm4_model.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::throws_with;

const std::string kData = GLM4_TEST_DATA;
const std::string kMoe = kData + "/moe/tiny_moe";
const std::string kAdapter = kData + "/moe/lora_train_moe";  // PEFT, r 4, alpha 8, all-linear
const std::string kLite = kData + "/moe_lite/tiny_lite";

json read_json(const fs::path& p) { return json::parse(std::ifstream(p)); }

struct Stored {
  Shape shape;
  std::vector<float> values;
};
std::map<std::string, Stored> tensors_of(const fs::path& file) {
  std::map<std::string, Stored> out;
  auto f = SafetensorsFile::open(file);  // alive while its tensors are read
  for (const TensorInfo& t : f->tensors()) out[t.name] = {t.shape, read_f32(t)};
  return out;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The same names, shapes and bits in both weight files.
void expect_same_tensors(const fs::path& a, const fs::path& b) {
  auto x = tensors_of(a), y = tensors_of(b);
  ASSERT_EQ(x.size(), y.size());
  for (const auto& [name, t] : x) {
    ASSERT_TRUE(y.count(name)) << name;
    EXPECT_EQ(t.shape, y[name].shape) << name;
    EXPECT_TRUE(bitwise_equal(t.values, y[name].values)) << name;
  }
}

std::vector<float> logits_of(const Glm4Model& m) {
  NoGradGuard no_grad;
  const std::vector<int32_t> ids{5, 17, 200, 3, 9, 41, 77, 100};
  ForwardContext ctx;
  ctx.batch = 1;
  ctx.seq = int64_t(ids.size());
  for (int64_t t = 0; t < ctx.seq; ++t) ctx.positions.push_back(t);
  return m.logits(m.forward_hidden(ids, ctx), ctx).to_vector();
}

// Rewrites DIR/adapters.safetensors through `edit` (which may change, add or drop tensors).
void rewrite_weights(const fs::path& dir,
                     const std::function<void(std::map<std::string, Stored>&)>& edit) {
  auto t = tensors_of(dir / "adapters.safetensors");
  edit(t);
  std::vector<TensorToWrite> out;
  for (const auto& [name, s] : t) out.push_back(f32_tensor(name, s.shape, s.values.data()));
  write_safetensors(dir / "adapters.safetensors", out);
}

// The stacked layout as mlx-lm's LoRASwitchLinear holds it: expert e's lora_a [r, in] and
// lora_b [out, r] are PEFT's A and B of model.layers.N.mlp.experts.e.X, untransposed; every other
// linear is LoRALinear, lora_a [in, r] = A^T and lora_b [r, out] = B^T; the keys in
// adapter_config.json are mlx-lm's layer-relative module paths; the scale is alpha / r.
TEST(MoeLoraMlx, KeysShapesAndScaleAreMlxLms) {
  testing::TempDir tmp;
  convert_adapter(kAdapter, tmp / "mlx", "mlx");
  const ModelConfig c = load_model_config(kMoe);
  const int64_t h = c.hidden_size, r = 4, E = c.n_routed_experts;
  auto mlx = tensors_of(tmp / "mlx" / "adapters.safetensors");
  auto peft = tensors_of(fs::path(kAdapter) / "adapter_model.safetensors");
  for (const auto& [name, t] : mlx) EXPECT_EQ(name.find(".experts."), std::string::npos) << name;
  const std::string sw = "model.layers.1.mlp.switch_mlp.";
  ASSERT_TRUE(mlx.count(sw + "gate_proj.lora_a"));
  EXPECT_EQ(mlx[sw + "gate_proj.lora_a"].shape, (Shape{E, r, h}));
  EXPECT_EQ(mlx[sw + "gate_proj.lora_b"].shape, (Shape{E, c.moe_intermediate_size, r}));
  EXPECT_EQ(mlx[sw + "down_proj.lora_a"].shape, (Shape{E, r, c.moe_intermediate_size}));
  EXPECT_EQ(mlx[sw + "down_proj.lora_b"].shape, (Shape{E, h, r}));
  const std::string peft_e = "base_model.model.model.layers.1.mlp.experts.";
  for (int64_t e : {int64_t(0), E - 1}) {
    const std::vector<float>& a = mlx[sw + "up_proj.lora_a"].values;
    const size_t per = size_t(r * h);
    std::vector<float> slice(a.begin() + ptrdiff_t(size_t(e) * per),
                             a.begin() + ptrdiff_t(size_t(e + 1) * per));
    EXPECT_TRUE(
        bitwise_equal(slice, peft[peft_e + std::to_string(e) + ".up_proj.lora_A.weight"].values));
  }
  // Shared experts, the dense layer's MLP and attention: LoRALinear, transposed.
  for (const std::string m : {"model.layers.2.mlp.shared_experts.up_proj",
                              "model.layers.0.mlp.gate_proj", "model.layers.1.self_attn.q_proj"}) {
    ASSERT_TRUE(mlx.count(m + ".lora_a")) << m;
    const Stored& a = mlx[m + ".lora_a"];
    const Stored& pa = peft["base_model.model." + m + ".lora_A.weight"];
    EXPECT_EQ(a.shape, (Shape{pa.shape[1], pa.shape[0]})) << m;
    EXPECT_EQ(a.values[1], pa.values[size_t(pa.shape[1])]) << m;  // a[0][1] = A[1][0]
    EXPECT_EQ(mlx[m + ".lora_b"].shape[0], r) << m;
  }
  json cfg = read_json(tmp / "mlx" / "adapter_config.json");
  EXPECT_EQ(cfg["num_layers"], 3);
  EXPECT_EQ(cfg["fine_tune_type"], "lora");
  EXPECT_EQ(cfg["lora_parameters"]["rank"], 4);
  EXPECT_EQ(cfg["lora_parameters"]["scale"].get<double>(), 2.0);  // alpha 8 / r 4
  const std::vector<std::string> keys = cfg["lora_parameters"]["keys"];
  for (const char* k :
       {"self_attn.q_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.shared_experts.gate_proj",
        "mlp.switch_mlp.gate_proj", "mlp.switch_mlp.up_proj", "mlp.switch_mlp.down_proj"})
    EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
  EXPECT_EQ(read_adapter_info(tmp / "mlx").lora.targets, read_adapter_info(kAdapter).lora.targets);
}

TEST(MoeLoraMlx, PeftToMlxToPeftIsBitForBit) {
  testing::TempDir tmp;
  convert_adapter(kAdapter, tmp / "mlx", "mlx", kMoe);
  convert_adapter(tmp / "mlx", tmp / "peft", "peft");
  expect_same_tensors(fs::path(kAdapter) / "adapter_model.safetensors",
                      tmp / "peft" / "adapter_model.safetensors");
  EXPECT_EQ(read_json(tmp / "peft" / "adapter_config.json")["target_modules"],
            read_json(fs::path(kAdapter) / "adapter_config.json")["target_modules"]);
  convert_adapter(tmp / "peft", tmp / "mlx2", "mlx");
  expect_same_tensors(tmp / "mlx" / "adapters.safetensors", tmp / "mlx2" / "adapters.safetensors");
}

TEST(MoeLoraMlx, MlxFormGivesThePeftFormsLogits) {
  testing::TempDir tmp;
  convert_adapter(kAdapter, tmp / "mlx", "mlx");
  auto peft = load_model(kMoe), mlx = load_model(kMoe);
  load_adapter(*peft, kAdapter);
  load_adapter(*mlx, tmp / "mlx");
  auto a = peft->lora_parameters(), b = mlx->lora_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(bitwise_equal(a[i].second.to_vector(), b[i].second.to_vector())) << a[i].first;
  const std::vector<float> x = logits_of(*peft), y = logits_of(*mlx);
  EXPECT_TRUE(bitwise_equal(x, y));
  EXPECT_FALSE(bitwise_equal(x, logits_of(*load_model(kMoe))));  // the adapter does something
}

// An expert with no module in the PEFT adapter is zero in the stacked tensors, and no module again
// when read back; without a base model the stack is as deep as the highest expert.
TEST(MoeLoraMlx, ExpertsWithoutAdapterAreZeroInTheStack) {
  testing::TempDir tmp;
  AdapterFile a = read_adapter_file(kAdapter);
  for (const char* p : {"gate_proj", "up_proj", "down_proj"})
    ASSERT_EQ(a.modules.erase(std::string("model.layers.2.mlp.experts.5.") + p), 1u);
  write_adapter_file(a, tmp / "partial", "peft");
  convert_adapter(tmp / "partial", tmp / "mlx", "mlx");
  auto mlx = tensors_of(tmp / "mlx" / "adapters.safetensors");
  const Stored& b = mlx["model.layers.2.mlp.switch_mlp.down_proj.lora_b"];
  ASSERT_EQ(b.shape[0], 16);
  const size_t per = size_t(b.shape[1] * b.shape[2]);
  for (int64_t e = 4; e <= 6; ++e) {
    bool zero = true;
    for (size_t i = 0; i < per; ++i) zero &= b.values[size_t(e) * per + i] == 0.0f;
    EXPECT_EQ(zero, e == 5) << "expert " << e;
  }
  convert_adapter(tmp / "mlx", tmp / "back", "peft");
  expect_same_tensors(tmp / "partial" / "adapter_model.safetensors",
                      tmp / "back" / "adapter_model.safetensors");
  // The model has every expert, so the strict load names the missing one in either layout.
  EXPECT_TRUE(throws_with([&] { load_adapter(*load_model(kMoe), tmp / "mlx"); },
                          {"model.layers.2.mlp.switch_mlp.gate_proj.lora_a[5]", "missing"}));
}

// glm4 train --adapter-format mlx on a MoE model: check_adapter_layout lets it through and
// save_adapter writes the stacked layout, which loads back to the same modules.
TEST(MoeLoraMlx, SaveAdapterWritesTheStackedLayout) {
  auto model = load_model(kMoe);
  LoraConfig lora;
  lora.rank = 2;
  lora.alpha = 3;
  lora.targets = {"experts.up_proj", "shared_experts", "v_proj"};
  check_adapter_layout(model->config, lora, "mlx");
  model->add_lora(lora, 7);
  for (auto& [name, t] : model->lora_parameters())
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data()[i] = 0.01f * float((i * 5 + int64_t(name.size())) % 11) - 0.05f;
  testing::TempDir tmp;
  save_adapter(*model, lora, tmp.path(), "mlx", "tiny_moe");
  EXPECT_TRUE(fs::exists(tmp / "adapters.safetensors"));
  json cfg = read_json(tmp / "adapter_config.json");
  EXPECT_EQ(cfg["lora_parameters"]["keys"],
            json({"self_attn.v_proj", "mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj",
                  "mlp.shared_experts.down_proj", "mlp.switch_mlp.up_proj"}));
  EXPECT_EQ(cfg["lora_parameters"]["scale"].get<double>(), 1.5);
  auto mlx = tensors_of(tmp / "adapters.safetensors");
  EXPECT_EQ(mlx["model.layers.2.mlp.switch_mlp.up_proj.lora_a"].shape,
            (Shape{16, 2, model->config.hidden_size}));
  EXPECT_EQ(read_adapter_info(tmp.path()).lora.targets, resolve_lora_targets(lora.targets, true));
  auto fresh = load_model(kMoe);
  load_adapter(*fresh, tmp.path());
  auto a = model->lora_parameters(), b = fresh->lora_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(bitwise_equal(a[i].second.to_vector(), b[i].second.to_vector())) << a[i].first;
}

// glm4_moe_lite: the same stacking; kv_b_proj has no LoRA in mlx-lm (embed_q / unembed_out).
TEST(MoeLoraMlx, LiteRoundTripsAndRefusesKvB) {
  auto model = load_model(kLite);
  LoraConfig lora;
  lora.rank = 2;
  lora.alpha = 4;
  lora.targets = {"q_a_proj", "kv_a_proj_with_mqa", "o_proj", "experts", "shared_experts"};
  model->add_lora(lora, 11);
  for (auto& [name, t] : model->lora_parameters())
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data()[i] = 0.02f * float((i * 3 + int64_t(name.size())) % 7) - 0.06f;
  testing::TempDir tmp;
  save_adapter(*model, lora, tmp / "peft", "peft", "tiny_lite");
  convert_adapter(tmp / "peft", tmp / "mlx", "mlx", kLite);
  convert_adapter(tmp / "mlx", tmp / "back", "peft");
  expect_same_tensors(tmp / "peft" / "adapter_model.safetensors",
                      tmp / "back" / "adapter_model.safetensors");
  auto p = load_model(kLite), m = load_model(kLite);
  load_adapter(*p, tmp / "peft");
  load_adapter(*m, tmp / "mlx");
  EXPECT_TRUE(bitwise_equal(logits_of(*p), logits_of(*m)));
  LoraConfig all;
  all.targets = {"all-linear"};
  EXPECT_TRUE(throws_with([&] { check_adapter_layout(model->config, all, "mlx"); },
                          {"--adapter-format mlx", "kv_b_proj", "embed_q"}));
  EXPECT_TRUE(
      throws_with([&] { convert_adapter(kData + "/moe_lite/lora_train_lite", tmp / "kvb", "mlx"); },
                  {"kv_b_proj", "PEFT layout"}));
}

TEST(MoeLoraMlx, BadFilesNameTheKey) {
  testing::TempDir tmp;
  convert_adapter(kAdapter, tmp / "good", "mlx");
  const std::string a = "model.layers.1.mlp.switch_mlp.gate_proj.lora_a";
  auto bad = [&](const std::string& name,
                 const std::function<void(std::map<std::string, Stored>&)>& edit) {
    fs::copy(tmp / "good", tmp / name);
    rewrite_weights(tmp / name, edit);
    return tmp / name;
  };
  auto flat = bad("flat", [&](auto& t) {
    t[a].shape = {t[a].shape[0] * t[a].shape[1], t[a].shape[2]};
  });
  EXPECT_TRUE(throws_with([&] { read_adapter_info(flat); }, {a, "[experts, r, in]"}));
  auto rank = bad("rank", [&](auto& t) {
    t[a].shape = {t[a].shape[0] / 2, t[a].shape[1] * 2, t[a].shape[2]};
  });
  EXPECT_TRUE(throws_with([&] { read_adapter_info(rank); }, {a, "rank 8", "config's rank 4"}));
  auto fewer = bad("fewer", [&](auto& t) {
    Stored& s = t["model.layers.1.mlp.switch_mlp.gate_proj.lora_b"];
    s.shape[0] -= 1;
    s.values.resize(size_t(s.shape[0] * s.shape[1] * s.shape[2]));
  });
  EXPECT_TRUE(throws_with([&] { read_adapter_info(fewer); },
                          {"experts but other switch_mlp tensors stack", "15"}));
  auto dora = bad("dora", [&](auto& t) {
    t["model.layers.1.mlp.switch_mlp.up_proj.m"] = {{16, 8}, std::vector<float>(128)};
  });
  EXPECT_TRUE(throws_with([&] { read_adapter_info(dora); },
                          {"model.layers.1.mlp.switch_mlp.up_proj.m", "no DoRA"}));
  auto per_expert = bad("per_expert", [&](auto& t) {
    t["model.layers.1.mlp.experts.3.gate_proj.lora_a"] = {{8, 4}, std::vector<float>(32)};
  });
  EXPECT_TRUE(throws_with([&] { read_adapter_info(per_expert); },
                          {"model.layers.1.mlp.experts.3.gate_proj.lora_a", "not LoRA tensors"}));
  auto wide = bad("wide", [&](auto& t) {
    for (const char* part : {".lora_a", ".lora_b"}) {
      Stored& s = t[std::string("model.layers.2.mlp.switch_mlp.up_proj") + part];
      s.shape.back() += part[6] == 'a' ? 1 : 0;
      if (part[6] == 'b') s.shape[1] += 1;
      s.values.resize(size_t(s.shape[0] * s.shape[1] * s.shape[2]));
    }
  });
  EXPECT_TRUE(throws_with([&] { load_adapter(*load_model(kMoe), wide); },
                          {"model.layers.2.mlp.switch_mlp.up_proj.lora_a[0]", "another model"}));
}

}  // namespace
}  // namespace glm4
