// --tools on generate and chat (embedded model): the tools go into the prompt, the reply is read
// into its parts ([thinking] shown apart, --json's content / reasoning_content / tool_calls),
// chat takes "/tool RESULT" as a tool turn, and a bad --tools file is an error naming it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/repo_paths.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using glm4::testing::kModel;
using glm4::testing::Result;
using glm4::testing::run_program;
using glm4::testing::run_program_with_input;
using glm4::testing::TempDir;
using json = nlohmann::json;
namespace fs = std::filesystem;

Result cli(const std::vector<std::string>& args) { return run_program(GLM4_BINARY, args, true); }
Result cli_all(const std::vector<std::string>& args) { return run_program(GLM4_BINARY, args); }

std::string tools_file(const TempDir& tmp) {
  const std::string path = (tmp / "tools.json").string();
  std::ofstream(path) << R"([{"type": "function", "function": {"name": "get_weather", )"
                      << R"("parameters": {"type": "object", "properties": {"city": )"
                      << R"({"type": "string"}}}}}])";
  return path;
}

TEST(CliTools, GenerateReadsTheReplyAndPutsToolsInThePrompt) {
  TempDir tmp;
  const std::string tools = tools_file(tmp);
  const std::vector<std::string> base = {"generate", "--model",  kModel,         "--chat",
                                         "--prompt", "Weather?", "--max-tokens", "6",
                                         "--temp",   "0",        "--json"};
  Result plain = cli(base);
  std::vector<std::string> with = base;
  with.insert(with.end(), {"--tools", tools});
  Result r = cli(with);
  ASSERT_EQ(plain.status, 0) << plain.output;
  ASSERT_EQ(r.status, 0) << r.output;
  const json a = json::parse(plain.output.substr(plain.output.find('{')));
  const json b = json::parse(r.output.substr(r.output.find('{')));
  // The tool list is in the prompt (GLM-4-0414's tool turn: the model's config says glm4).
  EXPECT_GT(b["prompt_ids"].size(), a["prompt_ids"].size() + 20);
  ASSERT_TRUE(b.contains("content") && b.contains("tool_calls")) << b.dump();
  EXPECT_TRUE(b["tool_calls"].is_array());
  EXPECT_FALSE(a.contains("tool_calls"));

  // Errors name the flag and the file.
  Result no_chat = cli_all({"generate", "--model", kModel, "--prompt", "x", "--tools", tools});
  EXPECT_NE(no_chat.status, 0);
  EXPECT_NE(no_chat.output.find("--tools needs --chat"), std::string::npos) << no_chat.output;
  const std::string bad = (tmp / "bad.json").string();
  std::ofstream(bad) << R"([{"type": "function", "function": {}}])";
  Result broken =
      cli_all({"generate", "--model", kModel, "--chat", "--prompt", "x", "--tools", bad});
  EXPECT_NE(broken.status, 0);
  EXPECT_NE(broken.output.find("--tools " + bad + ": [0] is not"), std::string::npos)
      << broken.output;
  Result missing = cli_all({"generate", "--model", kModel, "--chat", "--prompt", "x", "--tools",
                            (tmp / "none.json").string()});
  EXPECT_NE(missing.status, 0);
  EXPECT_NE(missing.output.find("--tools: cannot open"), std::string::npos) << missing.output;
}

// A tool-calling record as training renders it for the embedded model (config model_type "glm4",
// so GLM-4-0414's format): the tool turn, the call as "name \n" + arguments carrying loss, the
// tool's answer not, with or without --mask-prompt.
TEST(CliTools, TokenizeDataShowsGlm40414ToolTurns) {
  TempDir tmp;
  const std::string data = (tmp / "tools.jsonl").string();
  std::ofstream(data)
      << R"({"tools": [{"type": "function", "function": {"name": "get_weather", "parameters": )"
      << R"({}}}], "messages": [{"role": "user", "content": "Weather?"}, {"role": "assistant", )"
      << R"("content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", )"
      << R"("arguments": "{\"city\": \"Paris\"}"}}]}, {"role": "tool", "content": "sunny"}, )"
      << R"({"role": "assistant", "content": "Sunny."}]})"
      << "\n";
  Result r = cli({"tokenize", "--model", kModel, "--data", data, "--mask-prompt"});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("[gMASK]<sop><|system|>\\n# 可用工具\\n\\n## get_weather\\n\\n{"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("ChatGLM"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("<|assistant|>[[get_weather \\n{\"city\": \"Paris\"}<|observation|>]]"
                          "\\nsunny<|assistant|>[[\\nSunny.<|endoftext|>]]"),
            std::string::npos)
      << r.output;
  // Training on the prompt too: still never on what the tool answered.
  Result all = cli({"tokenize", "--model", kModel, "--data", data});
  ASSERT_EQ(all.status, 0) << all.output;
  EXPECT_NE(all.output.find("<|observation|>]]\\nsunny[[<|assistant|>"), std::string::npos)
      << all.output;
}

// The same model given GLM-4.7-Flash's template thinks first: the reply shows "[thinking] ".
TEST(CliTools, ReasoningIsShownApart) {
  TempDir tmp;
  const fs::path dir = tmp / "glm47";
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.model",
                        "tokenizer_config.json", "generation_config.json"})
    fs::create_symlink(fs::absolute(fs::path(kModel) / f), dir / f);
  fs::copy_file(fs::path(GLM4_TEST_DATA) / "chat_templates" / "GLM-4.7-Flash.jinja",
                dir / "chat_template.jinja");
  Result r = run_program(GLM4_BINARY,
                         {"generate", "--model", dir.string(), "--chat", "--prompt", "Hi",
                          "--max-tokens", "6", "--temp", "0", "--tools", tools_file(tmp)},
                         false);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.rfind("[thinking] ", 0), 0u) << r.output;
}

TEST(CliTools, ChatTakesToolResults) {
  TempDir tmp;
  Result r = run_program_with_input(
      GLM4_BINARY,
      {"chat", "--model", kModel, "--tools", tools_file(tmp), "--max-tokens", "4", "--temp", "0"},
      "Weather in Paris?\n/tool {\"temperature\": 21}\n");
  ASSERT_EQ(r.status, 0) << r.output;
  // Two replies: one to the user, one after the tool's answer (three prompts shown).
  size_t prompts = 0;
  for (size_t at = r.output.find("> "); at != std::string::npos; at = r.output.find("> ", at + 2))
    ++prompts;
  EXPECT_GE(prompts, 3u) << r.output;
  // The second line went in as the tool's answer, not as the user's words.
  EXPECT_NE(r.output.find("(tool result)"), std::string::npos) << r.output;
  // Without --tools, "/tool ..." is just what the user typed.
  Result plain = run_program_with_input(
      GLM4_BINARY, {"chat", "--model", kModel, "--max-tokens", "4", "--temp", "0"},
      "/tool {\"temperature\": 21}\n");
  ASSERT_EQ(plain.status, 0) << plain.output;
  EXPECT_EQ(plain.output.find("(tool result"), std::string::npos) << plain.output;
}

}  // namespace
}  // namespace glm4
