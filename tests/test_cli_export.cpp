// glm4 export gguf / gguf-lora end to end: the files load with our reader, --adapter merges the
// adapter into the exported weights, the LoRA file carries the adapter, and bad flags exit 1
// naming the flag.
#include <gtest/gtest.h>

#include "infer/merge.h"
#include "model/adapter/adapter_io.h"
#include "model/glm4_model.h"
#include "tests/support/gguf_reader.h"
#include "tests/support/random_adapter.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using glm4::testing::Result;
using glm4::testing::run;
using glm4::testing::succeeds;
using glm4::testing::TempDir;

const std::string kTinyGlm4 = std::string(GLM4_TEST_DATA) + "/tiny_glm4";

// A PEFT adapter on every linear of tiny_glm4 with random (non-zero) B.
void make_adapter(const std::string& dir) {
  LoraConfig lora;
  lora.rank = 4;
  lora.alpha = 8;
  lora.targets = {"all-linear"};
  testing::write_random_adapter(kTinyGlm4, dir, lora, 3, 0.05f);
}

TEST(CliExport, GgufWritesAFileOurReaderLoads) {
  TempDir dir;
  const std::string out = (dir / "m.gguf").string();
  Result r = run({"export", "gguf", "--model", kTinyGlm4, "--out", out, "--type", "q8_0"});
  ASSERT_TRUE(succeeds(r));
  EXPECT_NE(r.output.find("glm4, 29 tensors"), std::string::npos) << r.output;
  auto f = GgufFile::open(out);
  EXPECT_EQ(f->get_string("general.architecture"), "glm4");
  EXPECT_EQ(f->tensor("blk.0.attn_q.weight").type, GgmlType::Q8_0);
  EXPECT_EQ(f->tensor("blk.0.attn_q.bias").type, GgmlType::F32);
  EXPECT_EQ(dir.list(), std::vector<std::string>{"m.gguf"});
}

TEST(CliExport, AdapterIsMergedIntoTheExportedWeights) {
  TempDir dir;
  const std::string adapter = (dir / "adapter").string();
  make_adapter(adapter);
  const std::string out = (dir / "merged.gguf").string();
  ASSERT_TRUE(
      succeeds(run({"export", "gguf", "--model", kTinyGlm4, "--adapter", adapter, "--out", out})));
  auto merged = load_model(kTinyGlm4);
  load_adapter(*merged, adapter, kTinyGlm4);
  merge_adapters(*merged, DType::F32);
  auto base = load_model(kTinyGlm4);
  auto f = GgufFile::open(out);
  auto value = [](Glm4Model& m, const std::string& name) {
    std::vector<float> v;
    m.visit([&](const std::string& n, Param& p) {
      if (n == name) v = p.to_f32().to_vector();
    });
    return v;
  };
  const std::vector<float> got = f->tensor("blk.1.ffn_down.weight").to_f32();
  EXPECT_EQ(got, value(*merged, "model.layers.1.mlp.down_proj.weight"));
  EXPECT_NE(got, value(*base, "model.layers.1.mlp.down_proj.weight"));
}

TEST(CliExport, GgufLoraWritesTheAdapterPairs) {
  TempDir dir;
  const std::string adapter = (dir / "adapter").string();
  make_adapter(adapter);
  const std::string out = (dir / "lora.gguf").string();
  Result r = run({"export", "gguf-lora", "--model", kTinyGlm4, "--adapter", adapter, "--out", out,
                  "--type", "bf16"});
  ASSERT_TRUE(succeeds(r));
  auto f = GgufFile::open(out);
  EXPECT_EQ(f->get_string("general.type"), "adapter");
  EXPECT_EQ(f->get_string("adapter.type"), "lora");
  EXPECT_EQ(f->get_f32("adapter.lora.alpha"), 8.0f);
  EXPECT_EQ(f->tensors().size(), 2u * 6u * 2u);  // 6 modules a layer, 2 layers, A and B
  const GgufTensorInfo& b = f->tensor("blk.0.ffn_up.weight.lora_b");
  EXPECT_EQ(b.type, GgmlType::BF16);
  EXPECT_EQ(b.ne, (std::vector<int64_t>{4, 320}));
}

// glm4_moe: the fixture's PEFT adapter (every linear, per expert) merged into the stacked experts,
// and as llama.cpp's stacked expert LoRA pairs.
TEST(CliExport, MoeAdapterMergedIntoStackedExpertsAndExportedAsStackedPairs) {
  TempDir dir;
  const std::string model = std::string(GLM4_TEST_DATA) + "/moe/tiny_moe";
  const std::string adapter = std::string(GLM4_TEST_DATA) + "/moe/lora_train_moe";
  const std::string out = (dir / "merged.gguf").string();
  Result r = run({"export", "gguf", "--model", model, "--adapter", adapter, "--out", out});
  ASSERT_TRUE(succeeds(r));
  EXPECT_NE(r.output.find("glm4moe, 55 tensors"), std::string::npos) << r.output;
  auto merged = load_model(model);
  load_adapter(*merged, adapter, model);
  merge_adapters(*merged, DType::F32);
  std::vector<float> want;  // layer 2's up_proj of experts 0..15, stacked
  for (int e = 0; e < 16; ++e) {
    merged->visit([&](const std::string& n, Param& p) {
      if (n != "model.layers.2.mlp.experts." + std::to_string(e) + ".up_proj.weight") return;
      const std::vector<float> v = p.to_f32().to_vector();
      want.insert(want.end(), v.begin(), v.end());
    });
  }
  ASSERT_EQ(want.size(), size_t(16 * 16 * 32));
  const std::vector<float> got = GgufFile::open(out)->tensor("blk.2.ffn_up_exps.weight").to_f32();
  EXPECT_EQ(got, want);
  std::vector<float> expert0;
  load_model(model)->visit([&](const std::string& n, Param& p) {
    if (n == "model.layers.2.mlp.experts.0.up_proj.weight") expert0 = p.to_f32().to_vector();
  });
  EXPECT_NE(std::vector<float>(got.begin(), got.begin() + 16 * 32), expert0);  // the LoRA counted

  const std::string lora = (dir / "lora.gguf").string();
  r = run({"export", "gguf-lora", "--model", model, "--adapter", adapter, "--out", lora});
  ASSERT_TRUE(succeeds(r));
  EXPECT_NE(r.output.find("LoRA for glm4moe"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ggml_mul_mat_set_prec"), std::string::npos) << r.output;  // o_proj
  auto f = GgufFile::open(lora);
  EXPECT_EQ(f->get_string("general.architecture"), "glm4moe");
  EXPECT_EQ(f->tensor("blk.1.ffn_gate_exps.weight.lora_a").ne, (std::vector<int64_t>{32, 4, 16}));
  EXPECT_EQ(f->tensor("blk.1.ffn_down_exps.weight.lora_b").ne, (std::vector<int64_t>{4, 32, 16}));
  EXPECT_EQ(f->tensor("blk.0.ffn_gate.weight.lora_a").ne, (std::vector<int64_t>{32, 4}));
}

TEST(CliExport, BadFlagsExitOneNamingTheFlag) {
  TempDir dir;
  const std::string out = (dir / "x.gguf").string();
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {{"export", "gguf", "--model", kTinyGlm4, "--out", out, "--type", "q3_k"},
       {"--type", "q3_k", "q8_0"}},
      {{"export", "gguf", "--out", out}, {"--model"}},
      {{"export", "gguf", "--model", kTinyGlm4}, {"--out"}},
      {{"export", "gguf", "--model", (dir / "missing").string(), "--out", out},
       {"--model", "missing"}},
      {{"export", "gguf", "--model", kTinyGlm4, "--out", dir.path().string()},
       {"--out", "is a directory"}},
      {{"export", "gguf-lora", "--model", kTinyGlm4, "--adapter", kTinyGlm4, "--out", out, "--type",
        "q8_0"},
       {"--type", "q8_0", "f32, f16 or bf16"}},
      {{"export", "gguf-lora", "--model", kTinyGlm4, "--out", out}, {"--adapter"}},
      {{"export", "gguf-lora", "--model", kTinyGlm4, "--adapter", (dir / "none").string(), "--out",
        out},
       {"--adapter", "none"}},
      {{"export", "ggml"}, {"ggml"}},
  };
  for (const Case& c : cases) {
    Result r = run(c.args);
    EXPECT_EQ(r.status, 1) << r.output;
    for (const auto& p : c.parts)
      EXPECT_NE(r.output.find(p), std::string::npos) << p << " in: " << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace glm4
