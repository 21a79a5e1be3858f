// `glm4 serve` with tools and reasoning, end to end with the official OpenAI client
// (tests/serve/openai_tools.mjs) on the embedded model: a full tool round trip with a named
// tool_choice, streamed and not (GLM-4-0414's format: the model's config says glm4), forced
// calls' arguments that follow the tool's parameters schema (a named tool, "required" with one and
// with two tools), and reasoning_content split off a GLM-4.7 reply (the same model given
// GLM-4.7-Flash's chat template), streamed and not.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/support/repo_paths.h"
#include "tests/support/run_command.h"
#include "tests/support/server_process.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using glm4::testing::kModel;
using glm4::testing::Result;
using glm4::testing::ServerProcess;
using glm4::testing::TempDir;
using json = nlohmann::json;
namespace fs = std::filesystem;

const std::string kScript = std::string(GLM4_SOURCE_DIR) + "/tests/serve/openai_tools.mjs";

json run_client(const ServerProcess& server, const std::string& name, const std::string& phase) {
  Result r = glm4::testing::run_program(
      "env", {"GLM4_URL=" + server.url(), "GLM4_BASE=" + name, "node", kScript, phase});
  EXPECT_EQ(r.status, 0) << r.output << "\nserver log:\n" << server.log();
  // The last line (the results, whose strings may hold braces).
  const size_t end = r.output.find_last_not_of('\n');
  if (end == std::string::npos) return json();
  const size_t at = r.output.rfind('\n', end);
  return json::parse(r.output.substr(at == std::string::npos ? 0 : at + 1), nullptr, false);
}

TEST(ServeTools, NamedToolRoundTripStreamedAndNot) {
  ASSERT_TRUE(fs::exists(std::string(GLM4_SOURCE_DIR) + "/tests/node_modules/openai/package.json"))
      << "the OpenAI client is missing: run scripts/install_deps.sh (npm ci in tests/)";
  ServerProcess server({"--model", kModel, "--compute", "f32"});
  ASSERT_TRUE(server.listening()) << server.log();
  const json results = run_client(server, "glm4-tiny", "tools");
  ASSERT_TRUE(results.is_object());
  EXPECT_TRUE(results.contains("arguments") && results.contains("answer")) << results.dump();
  // The log line of a forced call names its finish reason as the answer did.
  EXPECT_NE(server.log().find("\"finish_reason\""), std::string::npos);
}

TEST(ServeTools, ForcedCallArgumentsFollowTheToolSchema) {
  ServerProcess server({"--model", kModel, "--compute", "f32"});
  ASSERT_TRUE(server.listening()) << server.log();
  const json results = run_client(server, "glm4-tiny", "arguments");
  ASSERT_TRUE(results.is_object());
  ASSERT_EQ(results.value("calls", json::array()).size(), 6u) << results.dump();
  for (const json& c : results["calls"]) {
    const json args = json::parse(c["arguments"].get<std::string>());
    EXPECT_TRUE(args.is_object() &&
                (args.contains("city") || args.contains("zone") || args.contains("offset")))
        << c.dump();
  }
}

// The embedded model given GLM-4.7-Flash's chat template, in `tmp`.
fs::path glm47_model(const TempDir& tmp) {
  const fs::path dir = tmp / "glm47-tiny";
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.model",
                        "tokenizer_config.json", "generation_config.json"})
    fs::create_symlink(fs::absolute(fs::path(kModel) / f), dir / f);
  fs::copy_file(fs::path(GLM4_TEST_DATA) / "chat_templates" / "GLM-4.7-Flash.jinja",
                dir / "chat_template.jinja");
  return dir;
}

TEST(ServeTools, ForcedCallPairsFollowTheToolSchemaGlm47) {
  TempDir tmp;
  ServerProcess server({"--model", glm47_model(tmp).string(), "--compute", "f32"});
  ASSERT_TRUE(server.listening()) << server.log();
  const json results = run_client(server, "glm47-tiny", "pairs");
  ASSERT_TRUE(results.is_object());
  ASSERT_EQ(results.value("calls", json::array()).size(), 4u) << results.dump();
  for (const json& c : results["calls"])
    EXPECT_TRUE(json::parse(c["arguments"].get<std::string>()).is_object()) << c.dump();
}

TEST(ServeTools, ReasoningSplitOffGlm47RepliesStreamedAndNot) {
  TempDir tmp;
  ServerProcess server({"--model", glm47_model(tmp).string(), "--compute", "f32"});
  ASSERT_TRUE(server.listening()) << server.log();
  const json results = run_client(server, "glm47-tiny", "reasoning");
  ASSERT_TRUE(results.is_object());
  EXPECT_FALSE(results.value("reasoning", "").empty()) << results.dump();
}

}  // namespace
}  // namespace glm4
