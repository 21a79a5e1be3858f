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
