// glm4 generate --json-schema on the embedded model: the reply at temperature 1 is JSON that
// follows the schema; a schema file that cannot be compiled fails naming the file and the path.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/repo_paths.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using glm4::testing::kModel;
using glm4::testing::run_program;

std::string write(const glm4::testing::TempDir& dir, const std::string& name,
                  const std::string& text) {
  const std::string path = (dir.path() / name).string();
  std::ofstream(path) << text;
  return path;
}

TEST(CliJsonSchema, TheReplyFollowsTheSchema) {
  glm4::testing::TempDir dir;
  const std::string schema = write(dir, "schema.json", R"({"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 12}, "population": {"type": "integer"},
    "capital": {"type": "boolean"}}, "required": ["capital", "city", "population"]})");
  int finished = 0;
  for (const char* seed : {"1", "2", "3"}) {
    const auto r = run_program(
        GLM4_BINARY,
        {"generate", "--model", kModel, "--chat", "--prompt", "A city as JSON.", "--json-schema",
         schema, "--temp", "1", "--seed", seed, "--max-tokens", "300", "--json"},
        true);
    ASSERT_EQ(r.status, 0) << r.output;
    const nlohmann::json out = nlohmann::json::parse(r.output);
    const nlohmann::json v =
        nlohmann::json::parse(out.at("text").get<std::string>(), nullptr, false);
    if (out.at("ids").size() >= 300) continue;  // ran out of tokens inside a string or number
    ++finished;
    ASSERT_TRUE(v.is_object()) << out.at("text");
    EXPECT_EQ(v.size(), 3u) << out.at("text");
    EXPECT_TRUE(v.at("city").is_string() && v.at("population").is_number_integer() &&
                v.at("capital").is_boolean())
        << out.at("text");
  }
  EXPECT_GE(finished, 2);
}

TEST(CliJsonSchema, BadSchemasNameTheFileAndPath) {
  glm4::testing::TempDir dir;
  const std::string bad = write(dir, "bad.json", R"({"properties": {"a": {"format": "date"}}})");
  auto r = run_program(GLM4_BINARY,
                       {"generate", "--model", kModel, "--prompt", "x", "--json-schema", bad});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(
      r.output.find("--json-schema " + bad + ": schema.properties.a: \"format\" is not supported"),
      std::string::npos)
      << r.output;
  const std::string broken = write(dir, "broken.json", "{");
  r = run_program(GLM4_BINARY,
                  {"generate", "--model", kModel, "--prompt", "x", "--json-schema", broken});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--json-schema " + broken + ": not valid JSON"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace glm4
