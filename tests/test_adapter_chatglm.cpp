// PEFT adapters of ChatGLM checkpoints: PEFT's own keys (transformer.encoder.layers.N.
// self_attention.query_key_value, dense, mlp.dense_h_to_4h, mlp.dense_4h_to_h), one A and one B
// over the fused q|k|v output, checked against tools/reference/adapter_ref.py's PyTorch reference
// (logits and gradients, LoRA and DoRA); saving, conversion to MLX and back, training targets,
// errors.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "autograd/node.h"
#include "infer/score.h"
#include "io/safetensors.h"
#include "model/adapter/adapter_files.h"
#include "model/adapter/adapter_io.h"
#include "model/glm4_model.h"
#include "tests/support/temp_dir.h"
#include "train/train_step.h"

namespace glm4 {
namespace {

using json = nlohmann::json;
using glm4::testing::TempDir;
using glm4::testing::throws_with;
namespace fs = std::filesystem;

const std::string kData = GLM4_TEST_DATA;
const std::string kChatGlm = kData + "/tiny_chatglm";
const std::string kPeft = kData + "/chatglm_peft";
const std::string kPeftDora = kData + "/chatglm_peft_dora";
const std::string kPrefix = "base_model.model.transformer.encoder.layers.";

std::vector<Example> fixture_rows(const SafetensorsFile& f) {
  const TensorInfo& ids = f.at("input_ids");
  const int64_t B = ids.shape[0], T = ids.shape[1];
  std::vector<int64_t> all = read_int(ids), lengths = read_int(f.at("lengths"));
  std::vector<Example> rows(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < lengths[size_t(b)]; ++t) {
      rows[size_t(b)].ids.push_back(int32_t(all[size_t(b * T + t)]));
      rows[size_t(b)].labels.push_back(int32_t(all[size_t(b * T + t)]));
    }
  return rows;
}

std::vector<float> row_logits(const Glm4Model& m, const std::vector<int32_t>& ids) {
  NoGradGuard no_grad;
  ForwardContext ctx;
  ctx.seq = int64_t(ids.size());
  for (int32_t t = 0; t < int32_t(ids.size()); ++t) ctx.positions.push_back(t);
  Tensor logits = m.logits(m.forward_hidden(ids, ctx), ctx);
  return {logits.data(), logits.data() + logits.numel()};
}

// max |ours - ref| / max |ref| over each row's real tokens of the fixture's [B, T, V] logits.
double logits_rel_error(const Glm4Model& m, const SafetensorsFile& f) {
  std::vector<float> ref = read_f32(f.at("logits"));
  const Shape& s = f.at("logits").shape;
  const int64_t T = s[1], V = s[2];
  double worst = 0, scale = 0;
  std::vector<Example> rows = fixture_rows(f);
  for (size_t b = 0; b < rows.size(); ++b) {
    std::vector<float> ours = row_logits(m, rows[b].ids);
    for (size_t i = 0; i < ours.size(); ++i) {
      const float r = ref[size_t(int64_t(b) * T * V) + i];
      worst = std::max(worst, double(std::abs(ours[i] - r)));
      scale = std::max(scale, double(std::abs(r)));
    }
  }
  return worst / scale;
}

double rel_error(const std::vector<float>& ours, const std::vector<float>& ref) {
  EXPECT_EQ(ours.size(), ref.size());
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < ref.size() && i < ours.size(); ++i) {
    worst = std::max(worst, double(std::abs(ours[i] - ref[i])));
    scale = std::max(scale, double(std::abs(ref[i])));
  }
  return worst / scale;
}

std::vector<float> values(const Tensor& t) { return t.to_vector(); }

std::vector<float> concat(std::vector<std::vector<float>> parts) {
  std::vector<float> out;
  for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::map<std::string, std::string> tensor_bytes(const fs::path& p) {
  auto f = SafetensorsFile::open(p);
  std::map<std::string, std::string> out;
  for (const TensorInfo& t : f->tensors())
    out[t.name] = std::string(reinterpret_cast<const char*>(t.data), t.nbytes);
  return out;
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

class ChatGlmPeftReference : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatGlmPeftReference, LogitsMatchPyTorch) {
  const std::string dir = GetParam();
  auto fixture = SafetensorsFile::open(dir + "/fixture.safetensors");
  auto model = load_model(kChatGlm);
  const double base_error = logits_rel_error(*model, *fixture);
  EXPECT_EQ(load_adapter(*model, dir, kChatGlm), "");
  const double error = logits_rel_error(*model, *fixture);
  std::printf("[ chatglm ] %s: logits rel error %.3g (base without the adapter: %.3g)\n",
              dir.c_str(), error, base_error);
  EXPECT_LE(error, 1e-5);
  EXPECT_GT(base_error, 1e-2);  // the adapter moves the logits far beyond the tolerance
}

// One A over q|k|v: its gradient is the sum over the three products, as in the fused layer.
TEST_P(ChatGlmPeftReference, GradientsMatchPyTorch) {
  const std::string dir = GetParam();
  auto fixture = SafetensorsFile::open(dir + "/fixture.safetensors");
  auto model = load_model(kChatGlm);
  load_adapter(*model, dir);
  const bool dora = read_adapter_info(dir).lora.dora;
  std::vector<Example> rows = fixture_rows(*fixture);
  Batch batch = make_batch(rows, 0, int64_t(rows.size()), 0);
  Tensor loss =
      batch_loss(*model, batch, {.divide_by = double(batch.target_tokens), .training = true});
  EXPECT_NEAR(loss.item(), read_f32(fixture->at("loss"))[0], 1e-5 * 6.3);
  backward(loss);
  for (int64_t layer = 0; layer < model->config.num_hidden_layers; ++layer) {
    auto lin = [&](const std::string& name) -> Linear& {
      return *model->find_linear(lora_module_path(layer, name));
    };
    auto ref = [&](const std::string& module, const std::string& part) {
      return read_f32(
          fixture->at("grad." + kPrefix + std::to_string(layer) + "." + module + "." + part));
    };
    const std::string qkv = "self_attention.query_key_value";
    ASSERT_EQ(lin("q_proj").lora->lora_A.impl(), lin("k_proj").lora->lora_A.impl());
    ASSERT_EQ(lin("q_proj").lora->lora_A.impl(), lin("v_proj").lora->lora_A.impl());
    EXPECT_LE(rel_error(values(lin("q_proj").lora->lora_A.grad()), ref(qkv, "lora_A.weight")), 1e-5)
        << layer;
    EXPECT_LE(rel_error(concat({values(lin("q_proj").lora->lora_B.grad()),
                                values(lin("k_proj").lora->lora_B.grad()),
                                values(lin("v_proj").lora->lora_B.grad())}),
                        ref(qkv, "lora_B.weight")),
              1e-5)
        << layer;
    if (dora) {
      EXPECT_LE(rel_error(concat({values(lin("q_proj").lora->magnitude.grad()),
                                  values(lin("k_proj").lora->magnitude.grad()),
                                  values(lin("v_proj").lora->magnitude.grad())}),
                          ref(qkv, "lora_magnitude_vector")),
                1e-5)
          << layer;
    }
    const std::vector<std::pair<std::string, std::string>> others{
        {"o_proj", "self_attention.dense"},
        {"gate_up_proj", "mlp.dense_h_to_4h"},
        {"down_proj", "mlp.dense_4h_to_h"}};
    for (const auto& [ours, theirs] : others) {
      EXPECT_LE(rel_error(values(lin(ours).lora->lora_A.grad()), ref(theirs, "lora_A.weight")),
                1e-5)
          << theirs;
      EXPECT_LE(rel_error(values(lin(ours).lora->lora_B.grad()), ref(theirs, "lora_B.weight")),
                1e-5)
          << theirs;
      if (dora) {
        EXPECT_LE(rel_error(values(lin(ours).lora->magnitude.grad()),
                            ref(theirs, "lora_magnitude_vector")),
                  1e-5)
            << theirs;
      }
    }
  }
  // Each shared A is one trainable tensor: 2 layers x (A + 3 B for q|k|v, A + B for 3 others).
  EXPECT_EQ(model->lora_parameters().size(), size_t(2 * (4 + 6) * 1 + (dora ? 2 * 6 : 0)));
}

// Saving the loaded adapter gives PEFT's ChatGLM file back: the same keys and bytes.
TEST_P(ChatGlmPeftReference, SaveWritesPeftsKeysBackUnchanged) {
  const std::string dir = GetParam();
  TempDir tmp;
  auto model = load_model(kChatGlm);
  load_adapter(*model, dir);
  AdapterInfo info = read_adapter_info(dir);
  EXPECT_EQ(info.lora.targets,
            (std::vector<std::string>{"query_key_value", "o_proj", "gate_up_proj", "down_proj"}));
  save_adapter(*model, info.lora, tmp / "a", "peft", "tiny_chatglm");
  EXPECT_EQ(tensor_bytes(tmp / "a/adapter_model.safetensors"),
            tensor_bytes(dir + "/adapter_model.safetensors"));
  json j = read_json(tmp / "a/adapter_config.json");
  EXPECT_EQ(j["target_modules"],
            json({"query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"}));
  EXPECT_EQ(j["use_dora"], info.lora.dora);
  auto again = load_model(kChatGlm);
  load_adapter(*again, tmp / "a");
  auto fixture = SafetensorsFile::open(dir + "/fixture.safetensors");
  EXPECT_LE(logits_rel_error(*again, *fixture), 1e-5);
}

// PEFT -> MLX splits query_key_value into q/k/v with the same lora_a; MLX -> PEFT joins them
// back bit for bit. The MLX adapter gives the same logits.
TEST_P(ChatGlmPeftReference, ConvertsToMlxAndBack) {
  const std::string dir = GetParam();
  TempDir tmp;
  EXPECT_TRUE(throws_with([&] { convert_adapter(dir, tmp / "nobase", "mlx"); },
                          {"query_key_value", "--model"}));
  convert_adapter(dir, tmp / "mlx", "mlx", kChatGlm);
  auto mlx = SafetensorsFile::open(tmp / "mlx/adapters.safetensors");
  const std::string l0 = "model.layers.0.self_attn.";
  EXPECT_EQ(read_f32(mlx->at(l0 + "q_proj.lora_a")), read_f32(mlx->at(l0 + "k_proj.lora_a")));
  EXPECT_EQ(read_f32(mlx->at(l0 + "q_proj.lora_a")), read_f32(mlx->at(l0 + "v_proj.lora_a")));
  EXPECT_EQ(mlx->at(l0 + "q_proj.lora_b").shape, (Shape{4, 64}));
  EXPECT_EQ(mlx->at(l0 + "k_proj.lora_b").shape, (Shape{4, 32}));
  json j = read_json(tmp / "mlx/adapter_config.json");
  EXPECT_EQ(j["fine_tune_type"], read_adapter_info(dir).lora.dora ? "dora" : "lora");
  EXPECT_EQ(j["model_type"], "chatglm");
  auto model = load_model(kChatGlm);
  load_adapter(*model, tmp / "mlx");
  auto fixture = SafetensorsFile::open(dir + "/fixture.safetensors");
  EXPECT_LE(logits_rel_error(*model, *fixture), 1e-5);
  convert_adapter(tmp / "mlx", tmp / "peft", "peft");
  EXPECT_EQ(tensor_bytes(tmp / "peft/adapter_model.safetensors"),
            tensor_bytes(dir + "/adapter_model.safetensors"));
  EXPECT_EQ(read_json(tmp / "peft/adapter_config.json")["target_modules"],
            json({"query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"}));
}

INSTANTIATE_TEST_SUITE_P(LoraAndDora, ChatGlmPeftReference, ::testing::Values(kPeft, kPeftDora));

TEST(ChatGlmTargets, ChatGlmNamesTrainTheFusedProjection) {
  auto model = load_model(kChatGlm);
  LoraConfig l;
  l.rank = 2;
  l.targets = {"query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"};
  EXPECT_EQ(model->add_lora(l, 3), 2 * 6);
  Linear& q = *model->find_linear("model.layers.1.self_attn.q_proj");
  Linear& v = *model->find_linear("model.layers.1.self_attn.v_proj");
  EXPECT_EQ(q.lora->lora_A.impl(), v.lora->lora_A.impl());
  EXPECT_EQ(v.lora->dropout_slot, q.seed_slot);
  EXPECT_EQ(model->lora_parameters().size(), size_t(2 * (1 + 3 + 2 * 3)));
  check_adapter_layout(model->config, l, "peft");
  check_adapter_layout(model->config, l, "mlx");
}

// Training the fused projection keeps one A per layer through the optimizer, and what it saves
// in PEFT's layout loads back to the same model.
TEST(ChatGlmTargets, FusedTrainingSavesPeftAndReloads) {
  TempDir tmp;
  auto model = load_model(kChatGlm);
  LoraConfig l;
  l.rank = 2;
  l.alpha = 4;
  l.targets = {"query_key_value", "dense"};
  model->add_lora(l, 3);
  AdamW opt(model->lora_parameters(),
            {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0});
  auto fixture = SafetensorsFile::open(kPeft + "/fixture.safetensors");
  std::vector<Example> rows = fixture_rows(*fixture);
  for (int s = 0; s < 2; ++s) train_step(*model, opt, {make_batch(rows, 0, 1, 0)}, {.lr = 1e-2});
  Linear& q = *model->find_linear("model.layers.0.self_attn.q_proj");
  Linear& k = *model->find_linear("model.layers.0.self_attn.k_proj");
  EXPECT_EQ(q.lora->lora_A.impl(), k.lora->lora_A.impl());
  save_adapter(*model, l, tmp / "a", "peft", kChatGlm);
  auto file = SafetensorsFile::open(tmp / "a/adapter_model.safetensors");
  EXPECT_EQ(file->tensors().size(), 2u * 2 * 2);  // layers x (query_key_value, dense) x (A, B)
  EXPECT_EQ(file->at(kPrefix + "0.self_attention.query_key_value.lora_B.weight").shape,
            (Shape{128, 2}));
  auto again = load_model(kChatGlm);
  load_adapter(*again, tmp / "a");
  EXPECT_EQ(row_logits(*again, rows[0].ids), row_logits(*model, rows[0].ids));
  EXPECT_NE(row_logits(*again, rows[0].ids), row_logits(*load_model(kChatGlm), rows[0].ids));
}

TEST(ChatGlmTargets, BadTargetsAreRefusedByName) {
  auto chatglm = load_model(kChatGlm);
  auto glm4 = load_model(kData + "/tiny_glm4");
  LoraConfig l;
  l.targets = {"query_key_value"};
  EXPECT_TRUE(throws_with([&] { glm4->add_lora(l, 0); }, {"query_key_value", "ChatGLM", "q_proj"}));
  EXPECT_TRUE(throws_with([&] { check_adapter_layout(glm4->config, l, "mlx"); },
                          {"query_key_value", "glm4"}));
  l.targets = {"query_key_value", "k_proj"};
  EXPECT_TRUE(
      throws_with([&] { chatglm->add_lora(l, 0); }, {"query_key_value", "k_proj", "overlap"}));
  l.targets = {"dense_h_to_8h"};
  EXPECT_TRUE(throws_with([&] { chatglm->add_lora(l, 0); },
                          {"unknown LoRA target module", "dense_h_to_8h"}));
  l.targets = {"q_proj", "v_proj"};  // separate q/v adapters: MLX only
  check_adapter_layout(chatglm->config, l, "mlx");
  EXPECT_TRUE(throws_with([&] { check_adapter_layout(chatglm->config, l, "peft"); },
                          {"q_proj", "query_key_value", "--adapter-format mlx"}));
}

void write_json(const fs::path& p, const json& j) {
  std::ofstream out(p);
  out << j.dump(2);
}

TEST(ChatGlmPeftErrors, BrokenFilesNameTheTensorAndFile) {
  TempDir tmp;
  auto copy = [&](const std::string& name) {
    fs::create_directories(tmp / name);
    for (const char* f : {"adapter_model.safetensors", "adapter_config.json"})
      fs::copy_file(kPeft + "/" + f, tmp / name / f);
    return tmp / name;
  };
  // A ChatGLM adapter on a glm4 model.
  auto glm4 = load_model(kData + "/tiny_glm4");
  EXPECT_TRUE(throws_with([&] { load_adapter(*glm4, kPeft); },
                          {"adapter_model.safetensors", "ChatGLM", "glm4"}));

  // Wrong B rows for query_key_value: the model has 64 + 32 + 32.
  fs::path bad = copy("rows");
  {
    auto f = SafetensorsFile::open(kPeft + "/adapter_model.safetensors");
    std::vector<std::vector<float>> keep;
    std::vector<TensorToWrite> out;
    for (const TensorInfo& t : f->tensors()) {
      Shape s = t.shape;
      std::vector<float>& v = keep.emplace_back(read_f32(t));
      if (t.name == kPrefix + "0.self_attention.query_key_value.lora_B.weight") {
        s[0] -= 8;
        v.resize(size_t(s[0] * s[1]));
      }
      out.push_back(f32_tensor(t.name, s, v.data()));
    }
    write_safetensors(bad / "adapter_model.safetensors", out, {{"format", "pt"}});
  }
  auto chatglm = load_model(kChatGlm);
  EXPECT_TRUE(throws_with([&] { load_adapter(*chatglm, bad); },
                          {kPrefix + "0.self_attention.query_key_value.lora_B.weight", "(120,4)",
                           "(128,4)", "another model"}));
  EXPECT_TRUE(chatglm->lora_parameters().empty());  // a bad adapter leaves the model alone

  // A target the config does not list.
  fs::path listed = copy("listed");
  json j = read_json(listed / "adapter_config.json");
  j["target_modules"] = {"query_key_value"};
  write_json(listed / "adapter_config.json", j);
  EXPECT_TRUE(throws_with([&] { read_adapter_info(listed); }, {"dense", "does not list"}));

  // A DoRA magnitude in an adapter that is not DoRA.
  fs::path mag = copy("magnitude");
  fs::copy_file(kPeftDora + "/adapter_model.safetensors", mag / "adapter_model.safetensors",
                fs::copy_options::overwrite_existing);
  EXPECT_TRUE(throws_with([&] { read_adapter_info(mag); }, {"lora_magnitude_vector", "use_dora"}));

  // DoRA adapter without its magnitudes.
  fs::path nomag = copy("nomag");
  j = read_json(nomag / "adapter_config.json");
  j["use_dora"] = true;
  write_json(nomag / "adapter_config.json", j);
  EXPECT_TRUE(
      throws_with([&] { read_adapter_info(nomag); }, {"lora_magnitude_vector", "is missing"}));
}

// MLX adapters with independent q/k/v A have no PEFT form for ChatGLM.
TEST(ChatGlmPeftErrors, IndependentQkvCannotBecomePeft) {
  TempDir tmp;
  auto model = load_model(kChatGlm);
  LoraConfig l;
  l.rank = 2;
  l.targets = {"q_proj", "k_proj", "v_proj", "dense"};
  model->add_lora(l, 5);
  save_adapter(*model, l, tmp / "mlx", "mlx", "");
  EXPECT_TRUE(throws_with([&] { save_adapter(*model, l, tmp / "peft", "peft", ""); },
                          {"q_proj", "query_key_value"}));
  EXPECT_TRUE(throws_with([&] { convert_adapter(tmp / "mlx", tmp / "peft", "peft", kChatGlm); },
                          {"layer 0", "different LoRA A", "query_key_value"}));
}

}  // namespace
}  // namespace glm4
