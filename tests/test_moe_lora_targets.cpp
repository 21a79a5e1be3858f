// glm4_moe's LoRA targets: which linears each name adapts (attention, dense MLP, shared and
// routed experts, all-linear), the router and the unsupported cases refused with a message,
// the PEFT layout written and read back for a narrowed target list, and per-request resident
// adapters on the experts equal to the live adapter.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "autograd/node.h"
#include "model/adapter/adapter_io.h"
#include "model/glm4_model.h"
#include "tests/support/expect_error.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

std::string moe_dir(const std::string& name) {
  return std::string(GLM4_TEST_DATA) + "/moe/" + name;
}

std::vector<std::string> adapted(Glm4Model& m) {
  std::vector<std::string> out;
  m.visit_linears([&](const LinearSite& site, Linear& l) {
    if (l.lora) out.push_back(site.path);
  });
  return out;
}

int64_t count_with(const std::vector<std::string>& paths, const std::string& part) {
  int64_t n = 0;
  for (const std::string& p : paths) n += p.find(part) != std::string::npos;
  return n;
}

TEST(MoeLoraTargets, ResolveNamesInCanonicalOrder) {
  EXPECT_EQ(resolve_lora_targets({"all-linear"}, true),
            (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                      "up_proj", "down_proj"}));
  EXPECT_EQ(resolve_lora_targets({"experts", "self_attn.q_proj"}, true),
            (std::vector<std::string>{"q_proj", "experts.gate_proj", "experts.up_proj",
                                      "experts.down_proj"}));
  // A qualified name is redundant beside its bare one.
  EXPECT_EQ(resolve_lora_targets({"shared_experts.up_proj", "up_proj", "mlp.down_proj"}, true),
            (std::vector<std::string>{"up_proj", "mlp.down_proj"}));
  testing::expect_error([] { resolve_lora_targets({"gate"}, true); },
                        "the glm4_moe router (mlp.gate) is not a linear layer");
  testing::expect_error([] { resolve_lora_targets({"gate_up_proj"}, true); },
                        "unknown LoRA target module \"gate_up_proj\" for glm4_moe");
  // The dense families keep their own names.
  EXPECT_EQ(resolve_lora_targets({"all-linear"}),
            (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate_up_proj",
                                      "down_proj"}));
}

TEST(MoeLoraTargets, EachNameAdaptsItsLinears) {
  struct Case {
    std::vector<std::string> targets;
    int64_t total, routed, shared, dense_mlp, attention;
  };
  // tiny_moe: 3 layers (layer 0 dense), 16 routed experts in layers 1 and 2.
  for (const Case& c :
       {Case{{"all-linear"}, 117, 96, 6, 3, 12}, Case{{"experts"}, 96, 96, 0, 0, 0},
        Case{{"shared_experts.up_proj", "q_proj"}, 5, 0, 2, 0, 3},
        Case{{"mlp.down_proj"}, 1, 0, 0, 1, 0}, Case{{"down_proj"}, 35, 32, 2, 1, 0},
        Case{{"experts.gate_proj", "o_proj"}, 35, 32, 0, 0, 3}}) {
    auto model = load_model(moe_dir("tiny_moe"));
    LoraConfig lora;
    lora.rank = 2;
    lora.targets = c.targets;
    EXPECT_EQ(model->add_lora(lora, 1), c.total) << c.targets[0];
    const std::vector<std::string> a = adapted(*model);
    EXPECT_EQ(count_with(a, ".mlp.experts."), c.routed) << c.targets[0];
    EXPECT_EQ(count_with(a, ".shared_experts."), c.shared) << c.targets[0];
    EXPECT_EQ(count_with(a, "layers.0.mlp."), c.dense_mlp) << c.targets[0];
    EXPECT_EQ(count_with(a, ".self_attn."), c.attention) << c.targets[0];
  }
}

TEST(MoeLoraTargets, UnsupportedCasesAreRefused) {
  auto model = load_model(moe_dir("tiny_moe"));
  LoraConfig dora;
  dora.dora = true;
  dora.targets = {"q_proj", "experts"};
  testing::expect_error([&] { model->add_lora(dora, 1); },
                        "DoRA on glm4_moe's MLP and expert linears");
  testing::expect_error(
      [&] {
        load_adapter(*load_model(std::string(GLM4_TEST_DATA) + "/tiny_glm4"),
                     moe_dir("lora_train_moe"));
      },
      "holds adapters of glm4_moe modules (experts, gate_proj, up_proj) but the model is glm4");
}

// Routed experts only: PEFT has no suffix for them, so target_modules is a regular expression;
// the file reads back with the same targets and loads into the same linears.
TEST(MoeLoraTargets, NarrowedAdapterRoundTripsThroughPeft) {
  auto model = load_model(moe_dir("tiny_moe"));
  LoraConfig lora;
  lora.rank = 2;
  lora.alpha = 4;
  lora.targets = {"experts.up_proj", "shared_experts", "k_proj"};
  model->add_lora(lora, 3);
  for (auto& [name, t] : model->lora_parameters())
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data()[i] = 0.01f * float((i * 7 + int64_t(name.size())) % 13);
  testing::TempDir tmp;
  save_adapter(*model, lora, tmp.path(), "peft", "tiny_moe");
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(tmp / "adapter_config.json"));
  ASSERT_TRUE(cfg["target_modules"].is_string()) << cfg["target_modules"].dump();
  EXPECT_EQ(
      cfg["target_modules"],
      R"(.*\.(k_proj|shared_experts\.gate_proj|shared_experts\.up_proj|shared_experts\.down_proj|experts\.[0-9]+\.up_proj))");
  const AdapterInfo info = read_adapter_info(tmp.path());
  EXPECT_EQ(info.lora.targets, resolve_lora_targets(lora.targets, true));
  auto fresh = load_model(moe_dir("tiny_moe"));
  load_adapter(*fresh, tmp.path());
  EXPECT_EQ(adapted(*fresh), adapted(*model));
  auto a = model->lora_parameters(), b = fresh->lora_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i].second.to_vector(), b[i].second.to_vector()) << a[i].first;
}

// Per-request adapters (serve): a resident adapter applied to one row of a batch gives that row
// the live adapter's logits and leaves the other row at the base's, through each expert's own
// subset of tokens.
TEST(MoeLoraTargets, ResidentAdapterRowsEqualTheLiveAdapter) {
  auto live = load_model(moe_dir("tiny_moe"));
  load_adapter(*live, moe_dir("lora_train_moe"));
  auto base = load_model(moe_dir("tiny_moe"));
  auto resident = load_model(moe_dir("tiny_moe"));
  load_resident_adapter(*resident, moe_dir("lora_train_moe"), 0);
  const std::vector<int32_t> ids{5, 17, 200, 3, 9, 41, 77, 100, 8, 2, 33, 61};
  NoGradGuard no_grad;
  auto logits = [&](const Glm4Model& m, const AdapterRows* rows) {
    ForwardContext ctx;
    ctx.batch = 2;
    ctx.seq = 6;
    for (int b = 0; b < 2; ++b)
      for (int t = 0; t < 6; ++t) ctx.positions.push_back(t);
    ctx.adapter_rows = rows;
    return m.logits(m.forward_hidden(ids, ctx), ctx).to_vector();
  };
  AdapterRows rows{{0, 6, 12}, {-1, 0}};  // row 0 base, row 1 adapted
  const std::vector<float> mixed = logits(*resident, &rows), with = logits(*live, nullptr),
                           without = logits(*base, nullptr);
  const size_t half = mixed.size() / 2;
  double worst_base = 0, worst_adapted = 0;
  for (size_t i = 0; i < half; ++i)
    worst_base = std::max(worst_base, double(std::abs(mixed[i] - without[i])));
  for (size_t i = half; i < mixed.size(); ++i)
    worst_adapted = std::max(worst_adapted, double(std::abs(mixed[i] - with[i])));
  EXPECT_LE(worst_base, 1e-5);
  EXPECT_LE(worst_adapted, 1e-5);
}

}  // namespace
}  // namespace glm4
