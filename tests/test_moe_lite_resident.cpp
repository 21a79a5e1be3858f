// Per-request (resident) adapters on glm4_moe_lite with the latent cache, as `glm4 serve` runs
// them: a row whose adapter adapts kv_b_proj expands its cached latents through it, the other
// rows stay in the latent space, and each row's logits equal the same adapter applied live to
// a model that runs the row alone.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "infer/cached_forward.h"
#include "model/adapter/adapter_io.h"
#include "model/glm4_model.h"
#include "tests/support/random_adapter.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

const std::string kModel = std::string(GLM4_TEST_DATA) + "/moe_lite/tiny_lite";

LoraConfig lora_on(std::vector<std::string> targets) {
  LoraConfig lora;
  lora.rank = 4;
  lora.alpha = 8;
  lora.targets = std::move(targets);
  return lora;
}

// Logits of the last token of each step, for `ids` fed as a 5-token prompt then 2 single tokens.
std::vector<std::vector<float>> alone(const std::filesystem::path& adapter,
                                      const std::vector<int32_t>& ids) {
  std::unique_ptr<Glm4Model> model = load_model(kModel);
  if (!adapter.empty()) load_adapter(*model, adapter);
  KvCache cache = make_cache(*model);
  std::vector<std::vector<float>> out;
  for (auto [first, n] : {std::pair<size_t, size_t>{0, 5}, {5, 1}, {6, 1}}) {
    CachedRow row{&cache, std::span<const int32_t>(ids.data() + first, n), int64_t(first)};
    out.push_back(cached_forward(*model, {&row, 1}, true).to_vector());
  }
  return out;
}

TEST(MoeLiteResident, KvBAdaptersOfEachRowEqualTheLiveAdapterAlone) {
  testing::TempDir tmp;
  // Adapter 0 adapts kv_b_proj alone; adapter 1 the queries and the experts.
  testing::write_random_adapter(kModel, tmp / "kv_b", lora_on({"kv_b_proj"}), 11, 0.3f);
  testing::write_random_adapter(kModel, tmp / "q", lora_on({"q_b_proj", "experts"}), 12, 0.3f);
  std::unique_ptr<Glm4Model> served = load_model(kModel);
  load_resident_adapter(*served, tmp / "kv_b", 0);
  load_resident_adapter(*served, tmp / "q", 1);

  const std::vector<std::vector<int32_t>> ids{
      {3, 17, 5, 9, 21, 4, 8}, {7, 2, 30, 11, 6, 19, 1}, {12, 12, 40, 3, 5, 22, 9}};
  const std::vector<std::filesystem::path> adapters{tmp / "kv_b", tmp / "q", {}};
  const std::vector<int32_t> slots{0, 1, -1};
  std::vector<std::vector<std::vector<float>>> want;
  for (size_t r = 0; r < ids.size(); ++r) want.push_back(alone(adapters[r], ids[r]));

  std::vector<KvCache> caches;
  for (size_t r = 0; r < ids.size(); ++r) caches.push_back(make_cache(*served));
  const int64_t V = served->config.vocab_size;
  double worst = 0, kv_b_effect = 0;
  size_t step = 0;
  for (auto [first, n] : {std::pair<size_t, size_t>{0, 5}, {5, 1}, {6, 1}}) {
    std::vector<CachedRow> rows;
    for (size_t r = 0; r < ids.size(); ++r)
      rows.push_back({&caches[r], std::span<const int32_t>(ids[r].data() + first, n),
                      int64_t(first), slots[r]});
    const std::vector<float> got = cached_forward(*served, rows, true).to_vector();
    for (size_t r = 0; r < ids.size(); ++r)
      for (int64_t v = 0; v < V; ++v) {
        const float g = got[size_t(int64_t(r) * V + v)], w = want[r][step][size_t(v)];
        worst = std::max(worst, double(std::abs(g - w)));
      }
    ++step;
  }
  // The kv_b adapter matters: its row's logits differ from the base model's.
  const std::vector<std::vector<float>> base = alone({}, ids[0]);
  for (size_t s = 0; s < base.size(); ++s)
    for (int64_t v = 0; v < V; ++v)
      kv_b_effect =
          std::max(kv_b_effect, double(std::abs(base[s][size_t(v)] - want[0][s][size_t(v)])));
  EXPECT_LE(worst, 1e-5);
  EXPECT_GT(kv_b_effect, 1e-3);
}

}  // namespace
}  // namespace glm4
