// The glm4 binary end to end: init writes model directories that load, logits reproduces the
// PyTorch fixture, adapters apply and convert, and every bad flag or file exits with status 1 and
// a message that names it.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autograd/kernels/bf16_gemm.h"
#include "autograd/kernels/cpu_features.h"
#include "autograd/kernels/kernel_selection.h"
#include "autograd/kernels/quant_kernels.h"
#include "autograd/kernels/quant_linear.h"
#include "autograd/node.h"
#include "io/model_files.h"
#include "io/safetensors.h"
#include "model/adapter/adapter_io.h"
#include "model/compute_choice.h"
#include "model/glm4_model.h"
#include "model/save.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"
#include "train/train_settings.h"

namespace glm4 {
namespace {

using glm4::testing::Result;
using glm4::testing::run;
using glm4::testing::run_program;
using glm4::testing::succeeds;
using glm4::testing::TempDir;
namespace fs = std::filesystem;

const std::string kSource = GLM4_SOURCE_DIR;
const std::string kTinyConfig = kSource + "/configs/tiny.json";
const std::string kTinyGlm4 = std::string(GLM4_TEST_DATA) + "/tiny_glm4";

std::vector<float> values(const SafetensorsFile& f, const std::string& name) {
  return read_f32(f.at(name));
}

TEST(Cli, HelpListsTheSubcommandsAndFlags) {
  Result top = run({"--help"});
  ASSERT_TRUE(succeeds(top));
  for (const char* s : {"init", "logits", "adapter"})
    EXPECT_NE(top.output.find(s), std::string::npos) << s;
  Result init = run({"init", "--help"});
  ASSERT_TRUE(succeeds(init));
  for (const char* s : {"--config", "--out", "--seed", "--dtype", "--shard-size", "--force"})
    EXPECT_NE(init.output.find(s), std::string::npos) << s;
  Result logits = run({"logits", "--help"});
  ASSERT_TRUE(succeeds(logits));
  for (const char* s : {"--model", "--tokens", "--text", "--out", "--adapter", "--dump-layers"})
    EXPECT_NE(logits.output.find(s), std::string::npos) << s;
  Result convert = run({"adapter", "convert", "--help"});
  ASSERT_TRUE(succeeds(convert));
  for (const char* s : {"--in", "--out", "--to", "peft", "mlx"})
    EXPECT_NE(convert.output.find(s), std::string::npos) << s;
}

// train's flags and --config keys come from one list (train/train_settings.h); the file is read
// first and the flags given win. Each case fails in the settings' checks, before any model loads.
TEST(Cli, TrainFlagsAreTheSettingsListAndWinOverTheConfigFile) {
  Result help = run({"train", "--help"});
  ASSERT_TRUE(succeeds(help));
  visit_train_settings([&](const char* key, auto, const char*) {
    EXPECT_NE(help.output.find(train_flag_name(key) + " "), std::string::npos) << key;
  });

  TempDir tmp;
  std::ofstream(tmp / "job.json")
      << R"({"_comment": "x", "model": "m", "data": "d", "out": "o", "iters": 5})";
  std::ofstream(tmp / "typo.json") << R"({"lerning_rate": 0.001})";
  std::ofstream(tmp / "broken.json") << R"({"iters": 5,})";
  const std::string job = (tmp / "job.json").string();
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> mentions;
  };
  const std::vector<Case> cases = {
      {{"train", "--config", job, "--warmup", "6"}, {"--warmup must be in [0, iters], got 6"}},
      {{"train", "--config", job, "--iters", "2", "--warmup", "3"},
       {"--warmup must be in [0, iters], got 3"}},
      {{"train", "--config", job, "--iters", "-1"}, {"--iters must be positive, got -1"}},
      {{"train", "--config", (tmp / "missing.json").string()},
       {"--config", "missing.json", "cannot open"}},
      {{"train", "--config", (tmp / "broken.json").string()},
       {"--config", "broken.json", "invalid JSON"}},
      {{"train", "--config", (tmp / "typo.json").string()},
       {"typo.json", "unknown key \"lerning_rate\""}},
  };
  for (const Case& c : cases) {
    Result r = run(c.args);
    EXPECT_EQ(r.status, 1) << c.args[2] << "\n" << r.output;
    for (const std::string& m : c.mentions)
      EXPECT_NE(r.output.find(m), std::string::npos)
          << "message lacks \"" << m << "\": " << r.output;
  }
}

TEST(Cli, InitThenLogits) {
  TempDir tmp;
  const std::string model = (tmp / "m").string(), out = (tmp / "l.safetensors").string();
  ASSERT_TRUE(succeeds(run({"init", "--config", kTinyConfig, "--out", model, "--seed", "7"})));
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
    EXPECT_TRUE(fs::exists(tmp / "m" / f)) << f;
  EXPECT_EQ(load_model_config(model), load_model_config(kTinyConfig));
  EXPECT_EQ(load_eos_ids(model), std::vector<int32_t>{1});

  ASSERT_TRUE(succeeds(
      run({"logits", "--model", model, "--tokens", "3, 1,4,1,5", "--out", out, "--dump-layers"})));
  auto file = SafetensorsFile::open(out);
  EXPECT_EQ(file->at("logits").shape, Shape({5, 512}));
  EXPECT_EQ(file->at("logits").dtype, "F32");
  EXPECT_EQ(file->at("hidden.0").shape, Shape({5, 64}));
  EXPECT_EQ(file->at("hidden.1").shape, Shape({5, 64}));
  EXPECT_EQ(file->at("hidden.final").shape, Shape({5, 64}));
  EXPECT_EQ(file->find("hidden.2"), nullptr);
  EXPECT_EQ(read_int(file->at("input_ids")), (std::vector<int64_t>{3, 1, 4, 1, 5}));

  // The same numbers as the library computes on the written model.
  auto m = load_model(model);
  NoGradGuard no_grad;
  std::vector<int32_t> ids{3, 1, 4, 1, 5};
  ForwardContext ctx;
  ctx.seq = 5;
  ctx.positions = {0, 1, 2, 3, 4};
  Tensor logits = m->logits(m->forward_hidden(ids, ctx), ctx);
  EXPECT_EQ(values(*file, "logits"),
            std::vector<float>(logits.data(), logits.data() + logits.numel()));

  // Without --dump-layers only the logits (and ids).
  ASSERT_TRUE(
      succeeds(run({"logits", "--model", model, "--tokens", "2", "--out", out, "--force"})));
  EXPECT_EQ(SafetensorsFile::open(out)->find("hidden.0"), nullptr);
}

TEST(Cli, InitIsReproducibleShardedAndBf16) {
  TempDir tmp;
  auto init = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> args{"init", "--config", kTinyConfig, "--out", (tmp / name).string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args);
  };
  ASSERT_TRUE(succeeds(init("a", {"--seed", "5"})));
  ASSERT_TRUE(succeeds(init("b", {"--seed", "5"})));
  ASSERT_TRUE(succeeds(init("c", {"--seed", "6"})));
  auto bytes = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(bytes(tmp / "a" / "model.safetensors"), bytes(tmp / "b" / "model.safetensors"));
  EXPECT_NE(bytes(tmp / "a" / "model.safetensors"), bytes(tmp / "c" / "model.safetensors"));

  ASSERT_TRUE(succeeds(init("sharded", {"--seed", "5", "--shard-size", "200KB"})));
  EXPECT_TRUE(fs::exists(tmp / "sharded" / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(tmp / "sharded" / "model.safetensors"));
  ModelFiles shards = ModelFiles::open(tmp / "sharded");
  EXPECT_GE(shards.files().size(), 3u);
  for (const auto& f : shards.files()) EXPECT_LE(fs::file_size(f->path()), 200'000u + 70'000u);
  // Same seed, same tensors, whatever the file layout.
  ModelFiles single = ModelFiles::open(tmp / "a");
  EXPECT_EQ(shards.keys(), single.keys());
  for (const std::string& k : single.keys())
    EXPECT_EQ(read_f32(shards.at(k)), read_f32(single.at(k))) << k;
  EXPECT_NO_THROW(load_model(tmp / "sharded"));

  ASSERT_TRUE(succeeds(init("bf16", {"--seed", "5", "--dtype", "bf16"})));
  auto bf16 = SafetensorsFile::open(tmp / "bf16" / "model.safetensors");
  for (const TensorInfo& t : bf16->tensors()) EXPECT_EQ(t.dtype, "BF16") << t.name;
  EXPECT_EQ(load_model_config(tmp / "bf16").torch_dtype, DType::BF16);
  std::vector<float> f32 = read_f32(single.at("lm_head.weight")),
                     half = values(*bf16, "lm_head.weight");
  ASSERT_EQ(f32.size(), half.size());
  for (size_t i = 0; i < f32.size(); ++i) ASSERT_EQ(bf16_to_f32(f32_to_bf16(f32[i])), half[i]);
  EXPECT_EQ(load_model(tmp / "bf16")->lm_head_weight().frozen.dtype(), DType::BF16);

  // init writes one generated tensor at a time: the bytes of the whole model made in memory by
  // init_random and saved.
  for (DType dtype : {DType::F32, DType::BF16}) {
    Glm4Model whole(load_model_config(kTinyConfig));
    init_random(whole, 5, dtype);
    const fs::path dir = tmp / ("whole_" + std::string(dtype_name(dtype)));
    save_model(whole, dir, dtype);
    EXPECT_EQ(bytes(dir / "model.safetensors"),
              bytes(tmp / (dtype == DType::F32 ? "b" : "bf16") / "model.safetensors"))
        << dtype_name(dtype);
  }

  // --force writes into a non-empty directory.
  EXPECT_EQ(init("a", {"--seed", "6"}).status, 1);
  ASSERT_TRUE(succeeds(init("a", {"--seed", "6", "--force"})));
  EXPECT_EQ(bytes(tmp / "a" / "model.safetensors"), bytes(tmp / "c" / "model.safetensors"));
}

TEST(Cli, LogitsMatchThePyTorchFixture) {
  TempDir tmp;
  auto fixture = SafetensorsFile::open(kTinyGlm4 + "/fixture.safetensors");
  std::vector<int64_t> ids = read_int(fixture->at("input_ids"));  // [2, 160], row 0 first
  const int64_t T = 20, V = 512;
  std::string list;
  for (int64_t t = 0; t < T; ++t) list.append(t ? "," : "").append(std::to_string(ids[size_t(t)]));
  const std::string out = (tmp / "l.safetensors").string();
  ASSERT_TRUE(succeeds(
      run({"logits", "--model", kTinyGlm4, "--tokens", list, "--out", out, "--dump-layers"})));
  auto file = SafetensorsFile::open(out);
  std::vector<float> got = values(*file, "logits"), want = read_f32(fixture->at("logits"));
  ASSERT_EQ(got.size(), size_t(T * V));
  double worst = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {  // row 0 of the fixture: its first T positions
    worst = std::max(worst, double(std::abs(got[i] - want[i])));
    scale = std::max(scale, double(std::abs(want[i])));
  }
  EXPECT_LE(worst / scale, 1e-4);
  std::vector<float> h = values(*file, "hidden.1"), href = read_f32(fixture->at("hidden.1"));
  for (size_t i = 0; i < h.size(); ++i) ASSERT_NEAR(h[i], href[i], 1e-4 * (1 + std::abs(href[i])));
}

TEST(Cli, AdapterConvertAndLogitsWithAdapter) {
  TempDir tmp;
  auto model = load_model(kTinyGlm4);
  LoraConfig lora;
  lora.rank = 2;
  lora.alpha = 4;
  lora.targets = {"all-linear"};
  model->add_lora(lora, 1);
  for (auto& [name, t] : model->lora_parameters())
    if (name.ends_with(".lora_B"))
      for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = 0.01f * float(i % 7 - 3);
  save_adapter(*model, lora, tmp / "peft", "peft", kTinyGlm4);
  ASSERT_TRUE(succeeds(run({"adapter", "convert", "--in", (tmp / "peft").string(), "--out",
                            (tmp / "mlx").string(), "--to", "mlx"})));
  EXPECT_TRUE(fs::exists(tmp / "mlx" / "adapters.safetensors"));
  EXPECT_TRUE(fs::exists(tmp / "mlx" / "adapter_config.json"));

  auto logits = [&](const std::string& adapter) {
    const std::string out = (tmp / ("l_" + adapter + ".safetensors")).string();
    std::vector<std::string> args{"logits",  "--model", kTinyGlm4, "--tokens",
                                  "5,6,7,8", "--out",   out};
    if (!adapter.empty()) args.insert(args.end(), {"--adapter", (tmp / adapter).string()});
    Result r = run(args);
    EXPECT_TRUE(succeeds(r));
    EXPECT_EQ(r.output.find("warning"), std::string::npos) << r.output;
    return read_f32(SafetensorsFile::open(out)->at("logits"));
  };
  std::vector<float> base = logits(""), peft = logits("peft"), mlx = logits("mlx");
  EXPECT_NE(base, peft);
  ASSERT_EQ(peft.size(), mlx.size());
  for (size_t i = 0; i < peft.size(); ++i)
    ASSERT_NEAR(peft[i], mlx[i], 1e-6 * (1 + std::abs(peft[i])));
}

// Each failure: status 1, one message naming the flag or file, never a crash.
// --compute: auto runs fp32 checkpoints in f32 and bf16 ones (also quantized from bf16) in bf16
// where the CPU has native bf16; without bf16 units but with AVX512-VNNI, quantized ones in bf16
// (fp32 products but the int8 decode and prefill) and bf16 ones in f32;
// the choice is reported in generate --json and is what the products then use.
TEST(Cli, ComputeFlagIsResolvedAndReported) {
  const std::string bf16_model = std::string(GLM4_TEST_DATA) + "/tiny_glm4_bf16";
  auto compute_of = [](const std::string& model, const std::string& flag) {
    auto r = run_program(GLM4_BINARY,
                         {"generate", "--model", model, "--tokens", "1,2,3", "--max-tokens", "4",
                          "--json", "--compute", flag},
                         true);
    EXPECT_TRUE(succeeds(r)) << flag;
    return nlohmann::json::parse(r.output);
  };
  EXPECT_EQ(compute_of(kTinyGlm4, "auto")["compute"], "f32");
  EXPECT_EQ(compute_of(bf16_model, "f32")["compute"], "f32");
  // Quantized models count as their scales' dtype: bf16 for tiny_glm4_q, f32 when quantized from
  // the fp32 checkpoint.
  TempDir tmp;
  const std::string from_f32 = (tmp / "q4").string();
  ASSERT_TRUE(succeeds(run(
      {"quantize", "--model", kTinyGlm4, "--out", from_f32, "--bits", "4", "--group-size", "32"})));
  EXPECT_EQ(compute_of(from_f32, "auto")["compute"], "f32");
  const bool native = kernels::bf16_kernel() != kernels::Bf16Kernel::kNone;
  const bool int8 = quant_int8_available();
  const nlohmann::json quantized = compute_of(std::string(GLM4_TEST_DATA) + "/tiny_glm4_q", "auto");
  EXPECT_EQ(quantized["compute"], native || int8 ? "bf16" : "f32") << quantized;
  EXPECT_EQ(quantized["quant_int8_decode"], int8) << quantized;
  EXPECT_EQ(quantized["quant_int8_prefill"], int8 && !native) << quantized;
  if (!native) {
    EXPECT_EQ(quantized["kernel"], "fp32") << quantized;
  }
  EXPECT_EQ(compute_of(bf16_model, "f32")["kernel"], "fp32");
  nlohmann::json automatic = compute_of(bf16_model, "auto");
  EXPECT_EQ(automatic["compute"], native ? "bf16" : "f32");
  if (native) {
    EXPECT_EQ(automatic["kernel"], kernels::bf16_kernel_name(kernels::bf16_kernel()));
    const int64_t rows = auto_bf16_max_rows(kernels::bf16_kernel(), kernels::cpu_features().intel);
    if (rows == kBf16AllRows) {
      EXPECT_FALSE(automatic.contains("bf16_max_rows")) << automatic;
    } else {
      EXPECT_EQ(automatic["bf16_max_rows"], rows) << automatic;
    }
    EXPECT_FALSE(compute_of(bf16_model, "bf16").contains("bf16_max_rows"))
        << "--compute bf16 has no row limit";
    EXPECT_EQ(compute_of(bf16_model, "bf16")["compute"], "bf16");
  } else if (int8) {
    const nlohmann::json chosen = compute_of(bf16_model, "bf16");
    EXPECT_EQ(chosen["compute"], "bf16") << chosen;
    EXPECT_EQ(chosen["kernel"], "fp32") << chosen;
  } else {
    auto r = run({"generate", "--model", bf16_model, "--tokens", "1,2", "--compute", "bf16"});
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.output.find("--compute bf16"), std::string::npos) << r.output;
  }
}

// What `generate --json` of two tokens reports on `model`, under the environment variables `env`
// (NAME=value) and the extra `flags`.
nlohmann::json generate_report(const std::vector<std::string>& env, const std::string& model,
                               const std::vector<std::string>& flags = {}) {
  std::vector<std::string> args = env;
  for (const char* a : {GLM4_BINARY, "generate", "--model"}) args.push_back(a);
  args.push_back(model);
  for (const char* a : {"--tokens", "1,2,3", "--max-tokens", "2", "--json"}) args.push_back(a);
  args.insert(args.end(), flags.begin(), flags.end());
  auto r = run_program("/usr/bin/env", args, true);
  EXPECT_TRUE(succeeds(r)) << r.output;
  return nlohmann::json::parse(r.output);
}

// generate --json reports what runs besides the compute choice: the fp32 backend, and the
// quantized kernels' instruction set, as this process selected them (the same CPU, the same
// environment); a kernel override changes what it reports.
TEST(Cli, GenerateJsonReportsTheKernels) {
  auto report = [](const std::vector<std::string>& env) {
    return generate_report(env, kTinyGlm4, {"--compute", "f32"});
  };
  nlohmann::json j = report({});
  EXPECT_EQ(j["fp32_backend"], kernels::fp32_backend_name(kernels::kernel_selection().fp32)) << j;
  EXPECT_EQ(j["quant_kernel"], quant_kernel_name()) << j;
  EXPECT_EQ(j["quant_int8_decode"], false) << j;
  EXPECT_EQ(j["quant_int8_prefill"], false) << j;
  EXPECT_EQ(j["kernel"], "fp32") << j;
  EXPECT_EQ(report({"GLM4_GEMM=eigen"})["fp32_backend"], "eigen");
  EXPECT_TRUE(report({"GLM4_GEMM=openblas"}).contains("blas_core"));
  EXPECT_EQ(report({"GLM4_QUANT_KERNEL=scalar"})["quant_kernel"], "scalar");
}

// The int8 kernels follow the selected quantized kernels: GLM4_QUANT_KERNEL=avx2 takes their AVX2
// form (4- and 8-bit codes, decode and prefill), scalar none, so a quantized model runs what an
// AVX2-only CPU, or one without SIMD, would (under auto: bf16 compute where int8 decode runs, else
// f32 when the CPU has no bf16 units either).
TEST(Cli, QuantKernelOverrideChoosesTheInt8Form) {
  const std::string quantized = std::string(GLM4_TEST_DATA) + "/tiny_glm4_q";
  auto report = [&](const std::vector<std::string>& env) {
    return generate_report(env, quantized);
  };
  const nlohmann::json chosen = report({});
  EXPECT_EQ(chosen["quant_int8_decode"], quant_int8_available()) << chosen;
  const bool native = kernels::bf16_kernel() != kernels::Bf16Kernel::kNone;
  for (const char* isa : {"avx2", "scalar"}) {
    if (!quant_detail::cpu_supports(isa)) continue;
    const nlohmann::json j = report({std::string("GLM4_QUANT_KERNEL=") + isa});
    const bool int8 = std::string(isa) == "avx2";
    EXPECT_EQ(j["quant_kernel"], isa) << j;
    EXPECT_EQ(j["quant_int8_decode"], int8) << j;
    EXPECT_EQ(j["quant_int8_prefill"], int8 && !native) << j;
    if (!native) {
      EXPECT_EQ(j["compute"], int8 ? "bf16" : "f32") << j;
    }
  }
}

// generate reads the weight files into 2 MB pages by default and maps them with --mmap, and says
// which in its JSON; train writes the same into its first metrics line.
TEST(Cli, WeightsAreReadIntoHugePagesUnlessMmapIsAsked) {
  const std::string model = GLM4_SOURCE_DIR "/models/glm4-tiny";  // one 10 MB file
  const auto bytes = fs::file_size(model + "/model.safetensors");
  auto load = [&](const std::vector<std::string>& flags) {
    std::vector<std::string> args{"generate", "--model",      model, "--tokens",
                                  "1,2,3",    "--max-tokens", "2",   "--json"};
    args.insert(args.end(), flags.begin(), flags.end());
    Result r = run(args);
    EXPECT_TRUE(succeeds(r)) << r.output;
    return nlohmann::json::parse(r.output);
  };
  nlohmann::json j = load({});
  EXPECT_EQ(j["weights_memory"], "huge_pages") << j;
  EXPECT_EQ(j["weights_bytes"], bytes) << j;
  EXPECT_TRUE(j["huge_page_bytes"].is_number_integer()) << j;
  EXPECT_GE(j["load_s"].get<double>(), 0.0) << j;
  EXPECT_EQ(load({"--no-mmap"})["weights_memory"], "huge_pages");
  nlohmann::json mapped = load({"--mmap"});
  EXPECT_EQ(mapped["weights_memory"], "mmap");
  EXPECT_EQ(mapped["ids"], j["ids"]);  // the same model either way
  Result both = run({"generate", "--model", model, "--tokens", "1", "--mmap", "--no-mmap"});
  EXPECT_EQ(both.status, 1);
  EXPECT_NE(both.output.find("--mmap"), std::string::npos) << both.output;

  TempDir tmp;
  std::ofstream(tmp / "train.jsonl") << R"({"text": "And God said, Let there be light"})"
                                     << "\n";
  ASSERT_TRUE(succeeds(run({"train", "--model", model, "--data", (tmp / "train.jsonl").string(),
                            "--out", (tmp / "run").string(), "--iters", "1", "--mmap"})));
  std::ifstream metrics(tmp / "run" / "metrics.jsonl");
  std::string first;
  std::getline(metrics, first);
  nlohmann::json setup = nlohmann::json::parse(first);
  EXPECT_EQ(setup["weights_memory"], "mmap") << first;
  EXPECT_EQ(setup["weights_bytes"], bytes) << first;
}

// --kv-cache bf16 holds a model's cache in half the bytes, a latent-attention model's and a GLM-4
// model's keys and values alike (generate's JSON says which and how many); other values are
// refused naming the flag.
TEST(Cli, KvCacheBf16HalvesTheCache) {
  const std::string lite = std::string(GLM4_TEST_DATA) + "/moe_lite/tiny_lite";
  auto generate = [&](const std::string& model, const std::string& cache) {
    return run({"generate", "--model", model, "--tokens", "5,17,200", "--max-tokens", "6", "--json",
                "--kv-cache", cache});
  };
  for (const std::string& model : {lite, std::string(kTinyGlm4)}) {
    const Result f32 = generate(model, "f32"), bf16 = generate(model, "bf16");
    ASSERT_TRUE(succeeds(f32)) << f32.output;
    ASSERT_TRUE(succeeds(bf16)) << bf16.output;
    const nlohmann::json a = nlohmann::json::parse(f32.output),
                         b = nlohmann::json::parse(bf16.output);
    EXPECT_EQ(a["kv_cache"], "f32");
    EXPECT_EQ(b["kv_cache"], "bf16");
    EXPECT_EQ(b["kv_cache_bytes"].get<int64_t>() * 2, a["kv_cache_bytes"].get<int64_t>()) << b;
    EXPECT_EQ(b["ids"].size(), 6u) << model;
  }
  const Result other = generate(lite, "f16");
  EXPECT_EQ(other.status, 1);
  EXPECT_EQ(other.output, "glm4: error: --kv-cache: f32 or bf16, got \"f16\"\n");
}

// A kernel override in the environment with a value it does not take, or one this CPU cannot
// run, stops the command with status 1 and a message naming the variable, the value and what it
// accepts.
TEST(Cli, BadKernelOverridesExitNamingTheVariable) {
  struct Case {
    std::string env;
    std::vector<std::string> mentions;
  };
  std::vector<Case> cases = {
      {"GLM4_GEMM=foo", {"GLM4_GEMM=foo", "openblas or eigen"}},
      {"GLM4_BF16_KERNEL=foo", {"GLM4_BF16_KERNEL=foo", "amx, avx512bf16 or none"}},
      {"GLM4_QUANT_KERNEL=neon", {"GLM4_QUANT_KERNEL=neon", "avx512, avx2 or scalar"}},
  };
  if (!kernels::bf16_kernel_available(kernels::Bf16Kernel::kAmx))
    cases.push_back({"GLM4_BF16_KERNEL=amx", {"GLM4_BF16_KERNEL=amx", "cannot run", "none"}});
  for (const Case& c : cases) {
    Result r =
        run_program("/usr/bin/env", {c.env, GLM4_BINARY, "generate", "--model", kTinyGlm4,
                                     "--tokens", "1,2", "--max-tokens", "2", "--compute", "f32"});
    EXPECT_EQ(r.status, 1) << c.env << "\n" << r.output;
    EXPECT_NE(r.output.find("glm4: error: environment variable"), std::string::npos)
        << c.env << "\n"
        << r.output;
    for (const std::string& m : c.mentions)
      EXPECT_NE(r.output.find(m), std::string::npos)
          << c.env << "\nmessage lacks \"" << m << "\": " << r.output;
  }
}

TEST(Cli, BadFlagsAndFilesExitWithOneAndNameTheCulprit) {
  TempDir tmp;
  const std::string out = (tmp / "x.safetensors").string();
  fs::create_directories(tmp / "full");
  std::ofstream(tmp / "full" / "something") << "x";
  {
    std::ifstream in(kTinyConfig);
    nlohmann::json bad = nlohmann::json::parse(in);
    bad["hidden_size"] = -64;
    std::ofstream(tmp / "bad.json") << bad.dump();
  }
  const std::string model_out = (tmp / "new").string();
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> mentions;
  };
  std::vector<Case> cases = {
      {{}, {"subcommand"}},
      {{"frobnicate"}, {"frobnicate"}},
      {{"init", "--out", model_out}, {"--config"}},
      {{"init", "--config", kTinyConfig}, {"--out"}},
      {{"init", "--config", (tmp / "missing.json").string(), "--out", model_out},
       {"--config", "missing.json"}},
      {{"init", "--config", (tmp / "bad.json").string(), "--out", model_out},
       {"--config", "bad.json", "hidden_size"}},
      {{"init", "--config", kTinyConfig, "--out", (tmp / "full").string()},
       {"--out", "not empty", "--force"}},
      {{"init", "--config", kTinyConfig, "--out", model_out, "--dtype", "f8"}, {"--dtype", "f8"}},
      {{"init", "--config", kTinyConfig, "--out", model_out, "--shard-size", "2XB"},
       {"--shard-size", "2XB"}},
      {{"init", "--config", kTinyConfig, "--out", model_out, "--seed", "abc"}, {"--seed"}},
      {{"init", "--config", kTinyConfig, "--out", model_out, "--bogus"}, {"--bogus"}},
      {{"logits", "--model", kTinyGlm4, "--out", out}, {"--tokens", "--text"}},
      {{"logits", "--model", kTinyGlm4, "--tokens", "1,2", "--out", out, "--compute", "fp8"},
       {"--compute", "fp8"}},
      {{"generate", "--model", kTinyGlm4, "--tokens", "1,2", "--compute", "half"},
       {"--compute", "half"}},
      {{"logits", "--model", kTinyGlm4, "--tokens", "1,x,3", "--out", out}, {"--tokens", "\"x\""}},
      {{"logits", "--model", kTinyGlm4, "--tokens", "1,,3", "--out", out}, {"--tokens"}},
      {{"logits", "--model", kTinyGlm4, "--tokens", "9999", "--out", out},
       {"--tokens", "9999", "512"}},
      {{"logits", "--model", kTinyGlm4, "--tokens", "1", "--text", "hi", "--out", out},
       {"--tokens", "--text"}},
      {{"logits", "--model", (tmp / "nomodel").string(), "--tokens", "1", "--out", out},
       {"--model", "nomodel"}},
      {{"logits", "--model", (tmp / "full").string(), "--tokens", "1", "--out", out},
       {"--model", "config.json"}},
      {{"logits", "--model", kTinyGlm4, "--tokens", "1", "--out",
        (tmp / "nodir" / "x.safetensors").string()},
       {"--out", "nodir"}},
      {{"logits", "--model", kTinyGlm4, "--tokens", "1", "--out", out, "--adapter",
        (tmp / "noadapter").string()},
       {"--adapter", "noadapter"}},
      {{"logits", "--model", kTinyGlm4, "--tokens", "1", "--out", out, "--adapter",
        (tmp / "full").string()},
       {"--adapter", "adapter_model.safetensors"}},
      {{"adapter"}, {"subcommand"}},
      {{"adapter", "convert", "--in", (tmp / "full").string(), "--out", (tmp / "o").string(),
        "--to", "gguf"},
       {"--to", "gguf", "peft or mlx"}},
      {{"adapter", "convert", "--in", (tmp / "noadapter").string(), "--out", (tmp / "o").string(),
        "--to", "mlx"},
       {"--in", "noadapter"}},
  };
  for (const Case& c : cases) {
    std::string cmd;
    for (const auto& a : c.args) cmd += a + " ";
    Result r = run(c.args);
    EXPECT_EQ(r.status, 1) << cmd << "\n" << r.output;
    for (const std::string& m : c.mentions)
      EXPECT_NE(r.output.find(m), std::string::npos)
          << cmd << "\nmessage lacks \"" << m << "\": " << r.output;
    EXPECT_EQ(r.output.find("terminate"), std::string::npos) << cmd << "\n" << r.output;
    if (std::getenv("GLM4_PRINT_ERRORS"))
      std::fprintf(stderr, "  %s-> %s", cmd.c_str(), r.output.c_str());
  }
  EXPECT_FALSE(fs::exists(model_out));  // no failed init left a directory behind
}

}  // namespace
}  // namespace glm4
