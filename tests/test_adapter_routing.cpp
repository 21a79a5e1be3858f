// Several adapters resident on one base: one cached forward with a different adapter per row
// equals each row run alone on a model holding only its adapter (live), and loading into a slot
// keeps load_adapter's checks.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/node.h"
#include "infer/cached_forward.h"
#include "model/adapter/adapter_io.h"
#include "tests/support/random_adapter.h"
#include "tests/support/repo_paths.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using glm4::testing::TempDir;
using glm4::testing::throws_with;

const std::string kTiny = std::string(GLM4_TEST_DATA) + "/tiny_glm4";

LoraConfig lora_of(std::vector<std::string> targets, int64_t rank, int64_t num_layers) {
  LoraConfig l;
  l.rank = rank;
  l.alpha = double(2 * rank);
  l.targets = std::move(targets);
  l.num_layers = num_layers;
  return l;
}

double relative_error(const float* a, const float* b, int64_t n) {
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    worst = std::max(worst, double(std::abs(a[i] - b[i])));
    scale = std::max(scale, double(std::abs(b[i])));
  }
  return worst / scale;
}

std::vector<int32_t> tokens(int n, int salt, int64_t vocab) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(int32_t((i * 53 + salt * 17 + 3) % vocab));
  return ids;
}

class AdapterRouting : public ::testing::Test {
 protected:
  void SetUp() override {
    glm4::testing::write_random_adapter(kTiny, dir / "a", lora_of({"all-linear"}, 4, -1), 11);
    glm4::testing::write_random_adapter(kTiny, dir / "b", lora_of({"q_proj", "v_proj"}, 2, 1), 12);
  }
  TempDir dir;
};

TEST_F(AdapterRouting, MixedRowsEqualEachRowAloneWithOnlyItsAdapter) {
  NoGradGuard no_grad;
  auto routed = load_model(kTiny);
  load_resident_adapter(*routed, dir / "a", 0, kTiny);
  load_resident_adapter(*routed, dir / "b", 1, kTiny);
  EXPECT_TRUE(routed->lora_parameters().empty());  // residents are not the live (trainable) adapter
  std::vector<std::unique_ptr<Glm4Model>> alone;   // slot -1, 0, 1
  alone.push_back(load_model(kTiny));
  for (const char* name : {"a", "b"}) {
    alone.push_back(load_model(kTiny));
    load_adapter(*alone.back(), dir / name, kTiny);
  }
  const int64_t V = routed->config.vocab_size;
  // Rows: adapter a, the base, adapter b, adapter a again, with different prompt lengths; a
  // prefill step, then two decode steps of one token per row.
  const std::vector<int32_t> slots = {0, -1, 1, 0};
  std::vector<std::vector<int32_t>> prompts;
  for (int r = 0; r < 4; ++r) prompts.push_back(tokens(5 + 3 * r, r, V));
  std::vector<KvCache> mixed, single;
  for (int r = 0; r < 4; ++r) {
    mixed.push_back(make_cache(*routed));
    single.push_back(make_cache(*routed));
  }
  std::vector<int64_t> position(4, 0);
  for (int step = 0; step < 3; ++step) {
    std::vector<std::vector<int32_t>> feed(4);
    std::vector<CachedRow> rows;
    for (int r = 0; r < 4; ++r) {
      feed[size_t(r)] =
          step == 0 ? prompts[size_t(r)] : std::vector<int32_t>{int32_t((7 * step + r) % V)};
      rows.push_back({&mixed[size_t(r)], feed[size_t(r)], position[size_t(r)], slots[size_t(r)]});
    }
    Tensor together = cached_forward(*routed, rows, true);  // [4, V]
    for (int r = 0; r < 4; ++r) {
      CachedRow row{&single[size_t(r)], feed[size_t(r)], position[size_t(r)]};
      Tensor one = cached_forward(*alone[size_t(slots[size_t(r)] + 1)], {&row, 1}, true);
      EXPECT_LE(relative_error(together.data() + r * V, one.data(), V), 1e-5)
          << "step " << step << " row " << r;
      position[size_t(r)] += int64_t(feed[size_t(r)].size());
    }
  }
  // The adapters matter: row 0 (adapter a) differs from the base on the same tokens.
  CachedRow base_row{&single[1], prompts[0], 0};
  KvCache fresh = make_cache(*routed);
  base_row.cache = &fresh;
  Tensor base = cached_forward(*alone[0], {&base_row, 1}, true);
  KvCache fresh_a = make_cache(*routed);
  CachedRow a_row{&fresh_a, prompts[0], 0, 0};
  Tensor with_a = cached_forward(*routed, {&a_row, 1}, true);
  EXPECT_GT(relative_error(with_a.data(), base.data(), V), 1e-3);
}

TEST_F(AdapterRouting, ResidentSlotsKeepTheChecksAndLeaveTheModelAloneOnFailure) {
  auto m = load_model(kTiny);
  load_resident_adapter(*m, dir / "a", 0, kTiny);
  EXPECT_TRUE(
      throws_with([&] { load_resident_adapter(*m, dir / "b", 0, kTiny); }, {"slot 0", "taken"}));
  // An adapter made for another model (hidden 256, not 64): refused, and the slot stays empty.
  glm4::testing::write_random_adapter(glm4::testing::kModel, dir / "x", lora_of({"q_proj"}, 2, -1),
                                      13);
  EXPECT_TRUE(
      throws_with([&] { load_resident_adapter(*m, dir / "x", 1, kTiny); }, {"another model"}));
  int64_t in_slot_1 = 0;
  m->visit_linears([&](const LinearSite&, Linear& lin) {
    in_slot_1 += lin.resident.size() > 1 && lin.resident[1];
  });
  EXPECT_EQ(in_slot_1, 0);
  // A live adapter and residents live side by side; the live one is what training sees.
  load_adapter(*m, dir / "b", kTiny);
  EXPECT_FALSE(m->lora_parameters().empty());
}

}  // namespace
}  // namespace glm4
