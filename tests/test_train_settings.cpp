// The one list of training settings (train/train_settings.h): its keys, and the JSON reader and
// writer it drives (the --config file, the checkpoint's copy of the config).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "tests/support/expect_error.h"
#include "train/config_keys.h"
#include "train/resume_plan.h"
#include "train/train_settings.h"

namespace glm4 {
namespace {

using glm4::testing::error_of;
using nlohmann::json;

std::vector<std::string> keys() {
  std::vector<std::string> out;
  visit_train_settings([&](const char* key, auto, const char*) { out.push_back(key); });
  return out;
}

TEST(TrainSettings, KeysAreDistinctSnakeCaseAndHaveHelp) {
  std::set<std::string> seen;
  visit_train_settings([&](const char* key, auto, const char* help) {
    EXPECT_TRUE(seen.insert(key).second) << "listed twice: " << key;
    EXPECT_TRUE(std::regex_match(key, std::regex("[a-z][a-z0-9_]*"))) << key;
    if (std::string(key) != "compute") {
      EXPECT_TRUE(help && *help) << key << " has no help text";
    }
  });
  EXPECT_GE(seen.size(), 30u);
  EXPECT_EQ(train_flag_name("learning_rate"), "--learning-rate");
  EXPECT_EQ(train_flag_name("model"), "--model");
}

// A value for every setting, each different from its default and from the others, so two keys
// read into or written from the same field would show.
json distinct_values() {
  json j = json::object();
  int i = 0;
  const TrainConfig defaults;
  visit_train_settings([&](const char* key, auto member, const char*) {
    using T = std::remove_cvref_t<decltype(defaults.*member)>;
    ++i;
    if constexpr (std::is_same_v<T, bool>)
      j[key] = !(defaults.*member);
    else if constexpr (std::is_same_v<T, std::string>)
      j[key] = std::string(key) + "_value";
    else if constexpr (std::is_same_v<T, std::vector<std::string>>)
      j[key] = {std::string(key), "x"};
    else if constexpr (std::is_floating_point_v<T>)
      j[key] = 1000.25 + i;
    else
      j[key] = T(1000 + i);
  });
  return j;
}

TEST(TrainSettings, EveryKeyIsReadAndWrittenBack) {
  const json values = distinct_values();
  TrainConfig c;
  apply_json(c, values, "every.json");
  EXPECT_EQ(to_json(c), values);

  std::set<std::string> written;
  const json defaults = to_json(TrainConfig{});
  for (const auto& [key, value] : defaults.items()) written.insert(key);
  const std::vector<std::string> listed = keys();
  EXPECT_EQ(written, std::set<std::string>(listed.begin(), listed.end()));
}

TEST(TrainSettings, ListsAlsoReadAsCommaSeparatedText) {
  TrainConfig c;
  apply_json(c, {{"lora_targets", "q_proj,v_proj"}}, "command line");
  EXPECT_EQ(c.lora_targets, (std::vector<std::string>{"q_proj", "v_proj"}));
  apply_json(c, {{"lora_targets", {"all-linear"}}}, "job.json");
  EXPECT_EQ(c.lora_targets, (std::vector<std::string>{"all-linear"}));
}

TEST(TrainSettings, UnknownKeysAndWrongTypesAreRefusedNamingThem) {
  TrainConfig c;
  EXPECT_EQ(error_of([&] {
              apply_json(c, {{"lerning_rate", 1e-3}}, "job.json");
            }),
            "job.json: unknown key \"lerning_rate\"");
  const std::string wrong = error_of([&] { apply_json(c, {{"iters", "ten"}}, "job.json"); });
  EXPECT_NE(wrong.find("job.json: key \"iters\" has the wrong type"), std::string::npos) << wrong;
  const std::string array = error_of([&] { apply_json(c, json::array(), "job.json"); });
  EXPECT_NE(array.find("job.json"), std::string::npos) << array;
  apply_json(c, {{"_comment", "ignored"}, {"_comment_lr", 1}, {"iters", 5}}, "job.json");
  EXPECT_EQ(c.iters, 5);
}

// mlx-lm's and PEFT's spellings of glm4's settings are renamed; their other keys are refused
// with glm4's key and flag named.
TEST(TrainSettings, MlxLmAndPeftKeysAreRenamedOrRefusedNamingGlm4s) {
  const json mlx = {{"model", "m"},
                    {"adapter_path", "runs/a"},
                    {"iters", 30},
                    {"learning_rate", 2e-4},
                    {"lora_layers", 2},
                    {"grad_accumulation_steps", 2},
                    {"lora_parameters",
                     {{"rank", 4},
                      {"scale", 10.0},
                      {"dropout", 0.1},
                      {"keys", {"self_attn.q_proj", "mlp.down_proj"}}}}};
  TrainConfig c;
  apply_json(c, translate_foreign_keys(mlx, "lora.json"), "lora.json");
  EXPECT_EQ(c.out, "runs/a");
  EXPECT_EQ(c.iters, 30);
  EXPECT_DOUBLE_EQ(c.learning_rate, 2e-4);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.grad_accum, 2);
  EXPECT_EQ(c.lora_rank, 4);
  EXPECT_DOUBLE_EQ(c.lora_alpha, 40.0);  // mlx-lm's scale 10 at rank 4 is PEFT's alpha 40
  EXPECT_DOUBLE_EQ(c.lora_dropout, 0.1);
  EXPECT_EQ(c.lora_targets, (std::vector<std::string>{"q_proj", "down_proj"}));

  const json peft = {
      {"r", 16},         {"lora_alpha", 32},  {"target_modules", {"q_proj", "v_proj"}},
      {"max_steps", 50}, {"warmup_steps", 5}, {"per_device_train_batch_size", 2}};
  TrainConfig p;
  apply_json(p, translate_foreign_keys(peft, "peft.json"), "peft.json");
  EXPECT_EQ(p.lora_rank, 16);
  EXPECT_DOUBLE_EQ(p.lora_alpha, 32);
  EXPECT_EQ(p.iters, 50);
  EXPECT_EQ(p.warmup, 5);
  EXPECT_EQ(p.batch_size, 2);

  EXPECT_EQ(error_of([&] {
              translate_foreign_keys({{"adapter_path", "a"}, {"out", "b"}}, "job.json");
            }),
            "job.json: \"adapter_path\" and \"out\" set the same thing; keep one");
  EXPECT_EQ(error_of([&] {
              apply_json(c, {{"lr", 1e-4}}, "job.json");
            }),
            "job.json: unknown key \"lr\": glm4 spells it 'learning_rate' (--learning-rate)");
  EXPECT_EQ(error_of([&] {
              apply_json(c, {{"epochs", 3}}, "job.json");
            }),
            "job.json: unknown key \"epochs\": glm4 counts optimizer steps: 'iters' (--iters)");
  EXPECT_EQ(error_of([&] {
              translate_foreign_keys(
                  {{"lr_schedule", {{"name", "cosine_decay"}, {"arguments", {1e-5, 1000}}}}},
                  "job.json");
            }),
            "job.json: \"lr_schedule\" is mlx-lm's schedule object; glm4 takes 'lr_schedule' "
            "(--lr-schedule) \"constant\" or \"cosine\", with 'warmup' (--warmup) and 'min_lr' "
            "(--min-lr)");
  // Every rename lands on a glm4 key and never shadows one.
  for (const char* foreign : {"adapter_path", "lora_layers", "r", "max_steps", "warmup_steps"}) {
    const json t = translate_foreign_keys({{foreign, 1}}, "x");
    EXPECT_FALSE(t.contains(foreign)) << foreign;
    const std::string glm4_key = t.begin().key();
    bool known = false;
    visit_train_settings([&](const char* key, auto, const char*) { known |= key == glm4_key; });
    EXPECT_TRUE(known) << foreign << " -> " << glm4_key;
  }
}

// --resume treats every setting by a rule (applied, refused or this machine's): a new setting
// without one fails here rather than being refused by surprise.
TEST(TrainSettings, EverySettingHasAResumeRule) {
  for (const std::string& key : keys()) EXPECT_NO_THROW(on_resume(key)) << key;
  EXPECT_EQ(on_resume("learning_rate"), OnResume::kApply);
  EXPECT_EQ(on_resume("iters"), OnResume::kApply);
  EXPECT_EQ(on_resume("lora_rank"), OnResume::kRefuse);
  EXPECT_EQ(on_resume("mask_prompt"), OnResume::kRefuse);
  EXPECT_EQ(on_resume("mmap"), OnResume::kMachine);
}

}  // namespace
}  // namespace glm4
