// Adapter files: PEFT and MLX round trips on the tiny GLM-4, conversion between the layouts,
// the reference script's PEFT adapter, and the errors for adapters that do not fit.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autograd/node.h"
#include "io/file/atomic_file.h"
#include "io/safetensors.h"
#include "model/adapter/adapter_io.h"
#include "model/glm4_model.h"
#include "model/save.h"
#include "tests/support/random_adapter.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using json = nlohmann::json;
using glm4::testing::TempDir;
using glm4::testing::throws_with;
namespace fs = std::filesystem;

const std::string kTiny = std::string(GLM4_TEST_DATA) + "/tiny_glm4";

LoraConfig test_lora(int64_t num_layers) {
  LoraConfig l;
  l.rank = 4;
  l.alpha = 8;
  l.dropout = 0.05;
  l.targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_up_proj", "down_proj"};
  l.num_layers = num_layers;
  return l;
}

// PEFT-initialised adapters with B made random too: B = 0 would hide transposition mistakes.
void add_random_adapter(Glm4Model& m, const LoraConfig& l, uint64_t seed) {
  m.add_lora(l, seed);
  testing::randomize_lora_b(m, uint32_t(seed) * 1000, 0.1f);
}

std::vector<float> logits_of(Glm4Model& m) {
  NoGradGuard no_grad;
  std::vector<int32_t> ids;
  for (int i = 0; i < 12; ++i) ids.push_back((i * 37 + 5) % int(m.config.vocab_size));
  ForwardContext ctx;
  ctx.seq = int64_t(ids.size());
  for (int32_t t = 0; t < int32_t(ids.size()); ++t) ctx.positions.push_back(t);
  Tensor logits = m.logits(m.forward_hidden(ids, ctx), ctx);
  return {logits.data(), logits.data() + logits.numel()};
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    worst = std::max(worst, double(std::abs(a[i] - b[i])));
    scale = std::max(scale, double(std::abs(b[i])));
  }
  return worst / scale;
}

// "module.lora_A" -> values.
std::map<std::string, std::vector<float>> lora_values(Glm4Model& m) {
  std::map<std::string, std::vector<float>> out;
  for (auto& [name, t] : m.lora_parameters()) out[name] = {t.data(), t.data() + t.numel()};
  return out;
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Every tensor of a safetensors file: name -> (dtype, shape, bytes).
std::map<std::string, std::tuple<std::string, Shape, std::string>> tensors_of(const fs::path& p) {
  auto f = SafetensorsFile::open(p);
  std::map<std::string, std::tuple<std::string, Shape, std::string>> out;
  for (const TensorInfo& t : f->tensors())
    out[t.name] = {t.dtype, t.shape, std::string(reinterpret_cast<const char*>(t.data), t.nbytes)};
  return out;
}

class AdapterRoundTrip : public ::testing::TestWithParam<std::tuple<std::string, int64_t>> {};

TEST_P(AdapterRoundTrip, SaveLoadGivesTheSameTensorsAndLogits) {
  auto [format, num_layers] = GetParam();
  TempDir tmp;
  auto model = load_model(kTiny);
  LoraConfig lora = test_lora(num_layers);
  add_random_adapter(*model, lora, 11);
  save_adapter(*model, lora, tmp / "a", format, "THUDM/tiny_glm4");
  const bool peft = format == "peft";
  const fs::path weights =
      tmp / "a" / (peft ? "adapter_model.safetensors" : "adapters.safetensors");
  EXPECT_EQ(tmp.list(), std::vector<std::string>{"a"});
  ASSERT_TRUE(fs::exists(weights));

  // Layout of the weight file: key names, orientation, F32.
  auto file = SafetensorsFile::open(weights);
  const int64_t adapted = num_layers < 0 ? 2 : num_layers;
  EXPECT_EQ(file->tensors().size(), size_t(adapted * 6 * 2));
  const std::string q = peft ? "base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight"
                             : "model.layers.1.self_attn.q_proj.lora_a";
  const std::string up = peft ? "base_model.model.model.layers.1.mlp.gate_up_proj.lora_B.weight"
                              : "model.layers.1.mlp.gate_up_proj.lora_b";
  EXPECT_EQ(file->at(q).shape, peft ? Shape({4, 64}) : Shape({64, 4}));
  EXPECT_EQ(file->at(up).shape, peft ? Shape({320, 4}) : Shape({4, 320}));
  EXPECT_EQ(file->at(q).dtype, "F32");
  EXPECT_EQ(file->metadata().at("format"), peft ? "pt" : "mlx");
  EXPECT_EQ(file->find(peft ? "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
                            : "model.layers.0.self_attn.q_proj.lora_a") != nullptr,
            num_layers < 0);

  // The config, as PEFT / mlx-lm write and read it.
  json cfg = read_json(tmp / "a" / "adapter_config.json");
  if (peft) {
    EXPECT_EQ(cfg["peft_type"], "LORA");
    EXPECT_EQ(cfg["task_type"], "CAUSAL_LM");
    EXPECT_EQ(cfg["r"], 4);
    EXPECT_TRUE(cfg["lora_alpha"].is_number_integer());
    EXPECT_EQ(cfg["lora_alpha"], 8);
    EXPECT_DOUBLE_EQ(cfg["lora_dropout"].get<double>(), 0.05);
    EXPECT_EQ(cfg["target_modules"],
              json({"q_proj", "k_proj", "v_proj", "o_proj", "gate_up_proj", "down_proj"}));
    EXPECT_EQ(cfg["bias"], "none");
    EXPECT_EQ(cfg["use_rslora"], false);
    EXPECT_EQ(cfg["use_dora"], false);
    EXPECT_EQ(cfg["fan_in_fan_out"], false);
    EXPECT_EQ(cfg["inference_mode"], true);
    EXPECT_EQ(cfg["base_model_name_or_path"], "THUDM/tiny_glm4");
    EXPECT_TRUE(cfg["modules_to_save"].is_null());
    EXPECT_EQ(cfg["rank_pattern"], json::object());
    if (num_layers < 0)
      EXPECT_TRUE(cfg["layers_to_transform"].is_null());
    else
      EXPECT_EQ(cfg["layers_to_transform"], json({1}));
  } else {
    EXPECT_EQ(cfg["fine_tune_type"], "lora");
    EXPECT_EQ(cfg["num_layers"], adapted);
    EXPECT_EQ(cfg["model"], "THUDM/tiny_glm4");
    EXPECT_EQ(cfg["lora_parameters"]["rank"], 4);
    EXPECT_DOUBLE_EQ(cfg["lora_parameters"]["scale"].get<double>(), 2.0);  // alpha / r
    EXPECT_DOUBLE_EQ(cfg["lora_parameters"]["dropout"].get<double>(), 0.05);
    EXPECT_EQ(cfg["lora_parameters"]["keys"],
              json({"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                    "mlp.gate_up_proj", "mlp.down_proj"}));
  }

  AdapterInfo info = read_adapter_info(tmp / "a");
  EXPECT_EQ(info.format, format);
  EXPECT_EQ(info.lora.rank, 4);
  EXPECT_DOUBLE_EQ(info.lora.alpha, 8);
  EXPECT_DOUBLE_EQ(info.lora.dropout, 0.05);
  EXPECT_DOUBLE_EQ(info.scale, 2.0);
  EXPECT_EQ(info.lora.targets, test_lora(-1).targets);
  EXPECT_EQ(info.lora.num_layers, num_layers);
  EXPECT_EQ(info.layers, num_layers < 0 ? std::vector<int64_t>{} : std::vector<int64_t>{1});
  EXPECT_EQ(info.base_model_name_or_path, "THUDM/tiny_glm4");

  auto loaded = load_model(kTiny);
  EXPECT_EQ(load_adapter(*loaded, tmp / "a", "/models/tiny_glm4"), "");  // same last component
  EXPECT_EQ(lora_values(*loaded), lora_values(*model));
  EXPECT_EQ(std::get<Glm4Attention>(loaded->layers[0].self_attn).q_proj.lora != nullptr,
            num_layers < 0);
  EXPECT_FLOAT_EQ(std::get<Glm4Mlp>(loaded->layers[1].mlp).down_proj.lora->scale, 2.0f);
  EXPECT_FLOAT_EQ(std::get<Glm4Mlp>(loaded->layers[1].mlp).down_proj.lora->dropout, 0.05f);
  EXPECT_LE(max_rel_diff(logits_of(*loaded), logits_of(*model)), 1e-6);
  // And the adapter changes the logits, so the comparison above means something.
  EXPECT_GT(max_rel_diff(logits_of(*load_model(kTiny)), logits_of(*model)), 1e-3);

  // Saving what was loaded gives the same files back.
  save_adapter(*loaded, info.lora, tmp / "b", format, info.base_model_name_or_path);
  EXPECT_EQ(read_bytes(tmp / "b" / "adapter_config.json"),
            read_bytes(tmp / "a" / "adapter_config.json"));
  EXPECT_EQ(tensors_of(weights), tensors_of(tmp / "b" / weights.filename()));
}

INSTANTIATE_TEST_SUITE_P(Layouts, AdapterRoundTrip,
                         ::testing::Combine(::testing::Values("peft", "mlx"),
                                            ::testing::Values(-1, 1)),
                         [](const auto& info) {
                           return std::get<0>(info.param) +
                                  (std::get<1>(info.param) < 0 ? "_all_layers" : "_last_layer");
                         });

TEST(AdapterConvert, PeftToMlxToPeftIsIdentical) {
  TempDir tmp;
  for (int64_t num_layers : {-1, 1}) {
    auto model = load_model(kTiny);
    add_random_adapter(*model, test_lora(num_layers), 5);
    const fs::path peft = tmp / "peft", mlx = tmp / "mlx", back = tmp / "back";
    save_adapter(*model, test_lora(num_layers), peft, "peft", "THUDM/tiny_glm4");
    if (num_layers > 0) {
      // "Layer 1" is the last N layers only if the model has 2: the converter must be told.
      EXPECT_TRUE(
          throws_with([&] { convert_adapter(peft, mlx, "mlx"); }, {"layer count", "base model"}));
      convert_adapter(peft, mlx, "mlx", kTiny);
    } else {
      convert_adapter(peft, mlx, "mlx");
    }
    EXPECT_EQ(read_json(mlx / "adapter_config.json")["num_layers"], num_layers < 0 ? 2 : 1);
    auto p = tensors_of(peft / "adapter_model.safetensors");
    auto m = tensors_of(mlx / "adapters.safetensors");
    ASSERT_EQ(p.size(), m.size());
    // lora_a is A transposed.
    const std::string pa = "base_model.model.model.layers.1.mlp.down_proj.lora_A.weight";
    const std::string ma = "model.layers.1.mlp.down_proj.lora_a";
    ASSERT_EQ(std::get<1>(m[ma]), Shape({160, 4}));
    const float* a = reinterpret_cast<const float*>(std::get<2>(p[pa]).data());
    const float* at = reinterpret_cast<const float*>(std::get<2>(m[ma]).data());
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 160; ++j) ASSERT_EQ(a[i * 160 + j], at[j * 4 + i]);

    convert_adapter(mlx, back, "peft");
    EXPECT_EQ(read_bytes(back / "adapter_config.json"), read_bytes(peft / "adapter_config.json"));
    EXPECT_EQ(tensors_of(back / "adapter_model.safetensors"), p);
    // mlx -> peft -> mlx too.
    convert_adapter(back, tmp / "mlx2", "mlx", kTiny);
    EXPECT_EQ(read_bytes(tmp / "mlx2" / "adapter_config.json"),
              read_bytes(mlx / "adapter_config.json"));
    EXPECT_EQ(tensors_of(tmp / "mlx2" / "adapters.safetensors"), m);
    for (const auto& d : {peft, mlx, back, tmp / "mlx2"}) fs::remove_all(d);
  }
}

TEST(AdapterConvert, RsLoraKeepsItsScaleInMlx) {
  TempDir tmp;
  auto model = load_model(kTiny);
  LoraConfig lora = test_lora(-1);
  lora.use_rslora = true;
  add_random_adapter(*model, lora, 3);
  save_adapter(*model, lora, tmp / "peft", "peft", "");
  EXPECT_EQ(read_json(tmp / "peft" / "adapter_config.json")["use_rslora"], true);
  convert_adapter(tmp / "peft", tmp / "mlx", "mlx");
  EXPECT_DOUBLE_EQ(
      read_json(tmp / "mlx" / "adapter_config.json")["lora_parameters"]["scale"].get<double>(),
      8.0 / 2.0);  // alpha / sqrt(r)
  auto a = load_model(kTiny), b = load_model(kTiny);
  load_adapter(*a, tmp / "peft");
  load_adapter(*b, tmp / "mlx");
  EXPECT_LE(max_rel_diff(logits_of(*a), logits_of(*model)), 1e-6);
  EXPECT_LE(max_rel_diff(logits_of(*b), logits_of(*model)), 1e-6);
}

// The adapter trained by the PyTorch reference (PEFT key names) loads, and its effect equals the
// weights merged as W + scale * B A.
// The adapter PEFT trained in the reference run gives the reference's logits (fp64, from the
// same fp32 adapter values) when loaded live, and the same once merged.
TEST(AdapterLoad, ReferencePeftAdapterGivesTheReferenceLogits) {
  TempDir tmp;
  auto fixture =
      SafetensorsFile::open(std::string(GLM4_TEST_DATA) + "/lora_train_glm4/fixture.safetensors");
  std::vector<TensorToWrite> tensors;
  for (const TensorInfo& t : fixture->tensors())
    if (t.name.rfind("final.", 0) == 0)
      tensors.push_back({t.name.substr(6), t.dtype, t.shape, t.data, t.nbytes});
  ASSERT_EQ(tensors.size(), 24u);
  fs::create_directories(tmp / "ref");
  write_safetensors(tmp / "ref" / "adapter_model.safetensors", tensors, {{"format", "pt"}});
  json meta = json::parse(fixture->metadata().at("meta"));
  json cfg = {{"peft_type", "LORA"},
              {"task_type", "CAUSAL_LM"},
              {"r", meta["r"]},
              {"lora_alpha", meta["lora_alpha"]},
              {"lora_dropout", 0.0},
              {"target_modules", meta["target_modules"]},
              {"bias", "none"},
              {"base_model_name_or_path", "tiny_glm4"},
              {"layers_to_transform", nullptr}};
  write_file_atomic(tmp / "ref" / "adapter_config.json", cfg.dump());

  auto adapted = load_model(kTiny);
  EXPECT_EQ(load_adapter(*adapted, tmp / "ref", kTiny), "");
  auto merged = load_model(kTiny);
  load_adapter(*merged, tmp / "ref");
  merged->visit_linears([](const LinearSite&, Linear& linear) {
    if (linear.lora) linear.merge_lora(DType::F32);
  });
  EXPECT_LE(max_rel_diff(logits_of(*adapted), logits_of(*merged)), 1e-5);
  EXPECT_GT(max_rel_diff(logits_of(*load_model(kTiny)), logits_of(*merged)), 1e-3);

  // Against the reference: step 0's first batch, every valid position.
  const std::string p = "step0.micro0.";
  const TensorInfo& ids_info = fixture->at(p + "input_ids");
  const int64_t B = ids_info.shape[0], T = ids_info.shape[1], V = adapted->config.vocab_size;
  std::vector<int64_t> ids = read_int(ids_info), lengths = read_int(fixture->at(p + "lengths"));
  std::vector<float> want = read_f32(fixture->at("final_logits"));  // [B, T, V]
  ASSERT_EQ(int64_t(want.size()), B * T * V);
  NoGradGuard no_grad;
  double worst = 0, scale = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = lengths[size_t(b)];
    std::vector<int32_t> row(ids.begin() + b * T, ids.begin() + b * T + n);
    ForwardContext ctx;
    ctx.seq = n;
    for (int64_t t = 0; t < n; ++t) ctx.positions.push_back(int32_t(t));
    Tensor got = adapted->logits(adapted->forward_hidden(row, ctx), ctx);  // [1, n, V]
    for (int64_t i = 0; i < n * V; ++i) {
      worst = std::max(worst, double(std::abs(got.data()[i] - want[size_t(b * T * V + i)])));
      scale = std::max(scale, double(std::abs(want[size_t(b * T * V + i)])));
    }
  }
  EXPECT_LE(worst / scale, 1e-5) << "max abs " << worst;
}

// An mlx-lm adapter_config.json carries every training argument and may omit "keys".
TEST(AdapterLoad, MlxConfigAsMlxLmWritesIt) {
  TempDir tmp;
  auto model = load_model(kTiny);
  LoraConfig lora = test_lora(-1);
  lora.targets = {"q_proj", "v_proj"};
  add_random_adapter(*model, lora, 8);
  save_adapter(*model, lora, tmp / "a", "mlx", "");
  json cfg = {{"model", "mlx-community/tiny"},
              {"train", true},
              {"fine_tune_type", "lora"},
              {"optimizer", "adam"},
              {"data", "data/"},
              {"seed", 0},
              {"num_layers", 2},
              {"batch_size", 4},
              {"iters", 1000},
              {"learning_rate", 1e-5},
              {"adapter_path", "adapters"},
              {"lora_parameters", {{"rank", 4}, {"alpha", 16}, {"dropout", 0.0}, {"scale", 2.0}}},
              {"lr_schedule", nullptr},
              {"grad_checkpoint", false}};
  write_file_atomic(tmp / "a" / "adapter_config.json", cfg.dump(4));
  AdapterInfo info = read_adapter_info(tmp / "a");
  EXPECT_EQ(info.lora.targets, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_DOUBLE_EQ(info.lora.alpha, 8.0);
  EXPECT_EQ(info.base_model_name_or_path, "mlx-community/tiny");
  auto loaded = load_model(kTiny);
  std::string warning = load_adapter(*loaded, tmp / "a", kTiny);
  EXPECT_NE(warning.find("mlx-community/tiny"), std::string::npos) << warning;
  EXPECT_LE(max_rel_diff(logits_of(*loaded), logits_of(*model)), 1e-6);
}

TEST(AdapterChatGlm, SeparateQkvRoundTripInMlxAndAreRefusedInPeft) {
  TempDir tmp;
  const std::string dir = std::string(GLM4_TEST_DATA) + "/tiny_chatglm";
  auto model = load_model(dir);
  add_random_adapter(*model, test_lora(-1), 2);
  EXPECT_TRUE(throws_with([&] { save_adapter(*model, test_lora(-1), tmp / "p", "peft", ""); },
                          {"ChatGLM", "query_key_value", "mlx"}));
  save_adapter(*model, test_lora(-1), tmp / "m", "mlx", "");
  auto loaded = load_model(dir);
  load_adapter(*loaded, tmp / "m");
  EXPECT_LE(max_rel_diff(logits_of(*loaded), logits_of(*model)), 1e-6);
}

// PEFT saves adapters in the model's dtype: bf16 tensors are widened on load.
TEST(AdapterLoad, Bf16TensorsAreWidened) {
  TempDir tmp;
  auto model = load_model(kTiny);
  add_random_adapter(*model, test_lora(-1), 6);
  save_adapter(*model, test_lora(-1), tmp / "a", "peft", "");
  auto file = SafetensorsFile::open(tmp / "a" / "adapter_model.safetensors");
  std::vector<std::vector<uint16_t>> halves;
  std::vector<TensorToWrite> tensors;
  for (const TensorInfo& t : file->tensors()) {
    std::vector<float> v = read_f32(t);
    std::vector<uint16_t>& h = halves.emplace_back(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
    tensors.push_back({t.name, "BF16", t.shape, h.data(), h.size() * 2});
  }
  file.reset();
  write_safetensors(tmp / "a" / "adapter_model.safetensors", tensors);
  auto loaded = load_model(kTiny);
  load_adapter(*loaded, tmp / "a");
  auto want = lora_values(*model), got = lora_values(*loaded);
  ASSERT_EQ(want.size(), got.size());
  for (auto& [key, v] : want)
    for (size_t i = 0; i < v.size(); ++i)
      ASSERT_EQ(got[key][i], bf16_to_f32(f32_to_bf16(v[i]))) << key;
}

// An adapter trained on a model of other sizes fails naming the key and both shapes.
TEST(AdapterErrors, AdapterOfAnotherModel) {
  TempDir tmp;
  json cfg = read_json(kTiny + "/config.json");
  cfg["hidden_size"] = 32;
  auto other = std::make_unique<Glm4Model>(parse_model_config(cfg, "other"));
  init_random(*other, 1);
  add_random_adapter(*other, test_lora(-1), 1);
  save_adapter(*other, test_lora(-1), tmp / "peft", "peft", "someone/other-model");
  save_adapter(*other, test_lora(-1), tmp / "mlx", "mlx", "someone/other-model");
  auto model = load_model(kTiny);
  EXPECT_TRUE(throws_with([&] { load_adapter(*model, tmp / "peft"); },
                          {"adapter_model.safetensors",
                           "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
                           "(4,32)", "expected (4,64)", "another model", "someone/other-model"}));
  EXPECT_TRUE(throws_with([&] { load_adapter(*model, tmp / "mlx"); },
                          {"adapters.safetensors", "model.layers.0.self_attn.q_proj.lora_a",
                           "(32,4)", "expected (64,4)", "another model"}));
  EXPECT_EQ(lora_values(*model).size(), 0u);  // a failed load leaves the model as it was

  // More layers than the model has.
  cfg = read_json(kTiny + "/config.json");
  cfg["num_hidden_layers"] = 3;
  auto deeper = std::make_unique<Glm4Model>(parse_model_config(cfg, "deeper"));
  init_random(*deeper, 1);
  add_random_adapter(*deeper, test_lora(1), 1);
  save_adapter(*deeper, test_lora(1), tmp / "deep", "peft", "");
  EXPECT_TRUE(throws_with([&] { load_adapter(*model, tmp / "deep"); },
                          {"layer 2", "2 layers", "another model"}));
  save_adapter(*deeper, test_lora(1), tmp / "deep_mlx", "mlx", "");
  EXPECT_TRUE(
      throws_with([&] { load_adapter(*model, tmp / "deep_mlx"); }, {"layer 2", "another model"}));
}

TEST(AdapterErrors, MissingAndBrokenFiles) {
  TempDir tmp;
  auto model = load_model(kTiny);
  add_random_adapter(*model, test_lora(-1), 4);
  save_adapter(*model, test_lora(-1), tmp / "good", "peft", "");
  auto fresh = [] { return load_model(kTiny); };

  EXPECT_TRUE(throws_with([&] { load_adapter(*fresh(), tmp / "nowhere"); },
                          {"nowhere", "not a directory"}));
  fs::create_directories(tmp / "empty");
  EXPECT_TRUE(throws_with([&] { read_adapter_info(tmp / "empty"); },
                          {"empty", "adapter_model.safetensors", "adapters.safetensors"}));

  auto copy = [&](const std::string& name) {
    fs::copy(tmp / "good", tmp / name, fs::copy_options::recursive);
    return tmp / name;
  };
  fs::path no_config = copy("no_config");
  fs::remove(no_config / "adapter_config.json");
  EXPECT_TRUE(
      throws_with([&] { load_adapter(*fresh(), no_config); }, {"adapter_config.json is missing"}));

  fs::path bad_json = copy("bad_json");
  write_file_atomic(bad_json / "adapter_config.json", "{\"r\": 4,");
  EXPECT_TRUE(throws_with([&] { load_adapter(*fresh(), bad_json); },
                          {"adapter_config.json", "invalid JSON"}));

  fs::path wrong_rank = copy("wrong_rank");
  json cfg = read_json(wrong_rank / "adapter_config.json");
  cfg["r"] = 8;
  write_file_atomic(wrong_rank / "adapter_config.json", cfg.dump());
  EXPECT_TRUE(throws_with([&] { load_adapter(*fresh(), wrong_rank); },
                          {"adapter_model.safetensors", "rank 4", "rank 8"}));

  fs::path dora = copy("dora");
  cfg = read_json(dora / "adapter_config.json");
  cfg["use_dora"] = true;
  write_file_atomic(dora / "adapter_config.json", cfg.dump());
  // use_dora without the magnitudes DoRA needs.
  EXPECT_TRUE(
      throws_with([&] { load_adapter(*fresh(), dora); }, {"lora_magnitude_vector", "is missing"}));

  fs::path wrong_type = copy("wrong_type");
  cfg = read_json(wrong_type / "adapter_config.json");
  cfg["lora_alpha"] = "sixteen";
  write_file_atomic(wrong_type / "adapter_config.json", cfg.dump());
  EXPECT_TRUE(throws_with([&] { load_adapter(*fresh(), wrong_type); },
                          {"adapter_config.json", "lora_alpha"}));

  fs::path unknown_target = copy("unknown_target");
  cfg = read_json(unknown_target / "adapter_config.json");
  cfg["target_modules"] = {"q_proj", "gate_proj"};
  write_file_atomic(unknown_target / "adapter_config.json", cfg.dump());
  EXPECT_TRUE(throws_with([&] { load_adapter(*fresh(), unknown_target); },
                          {"target_modules", "gate_proj"}));

  // Tensors removed from or added to the weight file.
  auto rewrite = [&](const std::string& name, const std::string& drop, bool add_extra) {
    fs::path dir = copy(name);
    auto file = SafetensorsFile::open(tmp / "good" / "adapter_model.safetensors");
    std::vector<TensorToWrite> tensors;
    for (const TensorInfo& t : file->tensors())
      if (t.name != drop) tensors.push_back({t.name, t.dtype, t.shape, t.data, t.nbytes});
    float extra[4] = {1, 2, 3, 4};
    if (add_extra)
      tensors.push_back(f32_tensor("base_model.model.lm_head.lora_A.weight", {1, 4}, extra));
    write_safetensors(dir / "adapter_model.safetensors", tensors);
    return dir;
  };
  const std::string b_key = "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight";
  fs::path no_b = rewrite("no_b", b_key, false);
  EXPECT_TRUE(throws_with([&] { load_adapter(*fresh(), no_b); },
                          {"adapter_model.safetensors", b_key, "missing"}));
  const std::string pair_a = "base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight";
  fs::path no_pair = rewrite("no_pair", "", false);
  {
    auto file = SafetensorsFile::open(tmp / "good" / "adapter_model.safetensors");
    std::vector<TensorToWrite> tensors;
    for (const TensorInfo& t : file->tensors())
      if (t.name != b_key && t.name != pair_a)
        tensors.push_back({t.name, t.dtype, t.shape, t.data, t.nbytes});
    write_safetensors(no_pair / "adapter_model.safetensors", tensors);
  }
  EXPECT_TRUE(
      throws_with([&] { load_adapter(*fresh(), no_pair); },
                  {"missing", "base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight"}));
  fs::path extra = rewrite("extra", "", true);
  EXPECT_TRUE(throws_with([&] { load_adapter(*fresh(), extra); },
                          {"adapter_model.safetensors", "base_model.model.lm_head.lora_A.weight"}));

  auto twice = fresh();
  load_adapter(*twice, tmp / "good");
  EXPECT_TRUE(throws_with([&] { load_adapter(*twice, tmp / "good"); }, {"already has LoRA"}));
  EXPECT_TRUE(throws_with([&] { convert_adapter(tmp / "good", tmp / "x", "gguf"); },
                          {"gguf", "peft or mlx"}));
  EXPECT_TRUE(throws_with(
      [&] { save_adapter(*load_model(kTiny), test_lora(-1), tmp / "none", "peft", ""); },
      {"no LoRA modules"}));
}

}  // namespace
}  // namespace glm4
