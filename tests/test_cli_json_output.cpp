// Every command that prints JSON prints it one way (io/file/json_line.h): one object per line,
// compact, keys sorted, UTF-8 as it is, floats in their shortest round-trip form. Each line must
// equal its own re-printing in that style, which fails for spaces after ':' or ',', unsorted
// keys, \u escapes of UTF-8 text or floats cut to a fixed number of digits.
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/file/json_line.h"
#include "tests/support/repo_paths.h"
#include "tests/support/run_command.h"
#include "tests/support/server_process.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using glm4::testing::kFinetune;
using glm4::testing::kModel;
using glm4::testing::Result;
using glm4::testing::run_program;
using glm4::testing::succeeds;
using glm4::testing::TempDir;
using json = nlohmann::json;
namespace fs = std::filesystem;

// Each line of `text` is one JSON object printed in the house style; returns them.
std::vector<json> house_lines(const std::string& text, const std::string& what) {
  std::vector<json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line, nullptr, false);
    EXPECT_TRUE(j.is_object()) << what << ": not one JSON object a line: " << line;
    if (!j.is_object()) continue;
    EXPECT_EQ(line, json_line(j)) << what;
    out.push_back(j);
  }
  EXPECT_FALSE(out.empty()) << what << " printed nothing";
  return out;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(JsonOutput, TheStyleItself) {
  EXPECT_EQ(json_line({{"b", 0.1}, {"a", "café ☕"}, {"c", {1, 2}}, {"n", 2.5e-7}}),
            R"({"a":"café ☕","b":0.1,"c":[1,2],"n":2.5e-07})");
  EXPECT_EQ(json_line(std::string("bad \xff byte")), "\"bad \xEF\xBF\xBD byte\"");  // U+FFFD
  EXPECT_EQ(json_line({{"x", std::nan("")}}), R"({"x":null})");
  // A value kept as a float prints as that float's shortest form, not its double expansion;
  // a double keeps every digit it needs.
  EXPECT_EQ(json_line({{"lr", 0.6f}, {"loss", {1.5f, 0.368f}}, {"d", 0.1 + 0.2}}),
            R"({"d":0.30000000000000004,"loss":[1.5,0.368],"lr":0.6})");
}

TEST(JsonOutput, EvaluatePerplexityClassifyAndGenerate) {
  TempDir tmp;
  const std::string valid = kFinetune + "/valid.jsonl";
  Result eval = run_program(
      GLM4_BINARY, {"evaluate", "--model", kModel, "--data", valid, "--max-examples", "3"}, true);
  ASSERT_TRUE(succeeds(eval)) << eval.output;
  EXPECT_EQ(house_lines(eval.output, "evaluate").size(), 1u);

  Result ppl = run_program(GLM4_BINARY, {"perplexity", "--model", kModel, "--data", valid}, true);
  ASSERT_TRUE(succeeds(ppl)) << ppl.output;
  const std::vector<json> p = house_lines(ppl.output, "perplexity");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(p[0]["loss"].is_number_float() && p[0]["tokens"].is_number_integer()) << p[0];

  {
    std::ofstream out(tmp / "cls.jsonl");
    out << R"({"messages": [{"role": "user", "content": "Tang or Bible? ☕"}, )"
        << R"({"role": "assistant", "content": "Tang poem"}]})"
        << "\n"
        << R"({"messages": [{"role": "user", "content": "In the beginning"}, )"
        << R"({"role": "assistant", "content": "Bible"}]})"
        << "\n";
  }
  Result cls =
      run_program(GLM4_BINARY,
                  {"classify", "--model", kModel, "--data", (tmp / "cls.jsonl").string(),
                   "--labels", "Bible,Tang poem", "--predictions", (tmp / "pred.jsonl").string()},
                  true);
  ASSERT_TRUE(succeeds(cls)) << cls.output;
  EXPECT_EQ(house_lines(cls.output, "classify").size(), 1u);
  EXPECT_EQ(house_lines(read_file(tmp / "pred.jsonl"), "classify --predictions").size(), 2u);

  Result one = run_program(
      GLM4_BINARY,
      {"generate", "--model", kModel, "--prompt", "Héllo ☕", "--max-tokens", "4", "--json"}, true);
  ASSERT_TRUE(succeeds(one)) << one.output;
  EXPECT_EQ(house_lines(one.output, "generate --json").size(), 1u);

  std::ofstream(tmp / "prompts.txt") << "Once\n{\"prompt\": \"Café ☕\"}\n";
  Result many = run_program(GLM4_BINARY,
                            {"generate", "--model", kModel, "--prompts-file",
                             (tmp / "prompts.txt").string(), "--max-tokens", "3", "--json"},
                            true);
  ASSERT_TRUE(succeeds(many)) << many.output;
  const std::vector<json> lines = house_lines(many.output, "generate --prompts-file --json");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1]["prompt"], "Café ☕");
  EXPECT_NE(many.output.find("Café ☕"), std::string::npos);  // UTF-8 as it is, not \u00e9
}

TEST(JsonOutput, TrainMetricsAndServeEvents) {
  TempDir tmp;
  Result train = run_program(GLM4_BINARY,
                             {"train", "--model", kModel, "--data", kFinetune, "--out",
                              (tmp / "run").string(), "--iters", "2", "--steps-per-report", "1",
                              "--steps-per-eval", "2", "--val-batches", "1", "--batch-size", "2"});
  ASSERT_TRUE(succeeds(train)) << train.output;
  EXPECT_GE(house_lines(read_file(tmp / "run" / "metrics.jsonl"), "metrics.jsonl").size(), 3u);

  glm4::testing::ServerProcess server({"--model", kModel});
  ASSERT_TRUE(server.listening()) << server.log();
  ASSERT_EQ(server.stop(SIGTERM), 0) << server.log();
  std::string events;  // the server's stdout lines that are JSON (its log is stdout and stderr)
  std::istringstream in(server.log());
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') events += line + "\n";
  const std::vector<json> lines = house_lines(events, "serve");
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines.front()["event"], "listening");
  EXPECT_EQ(lines.back()["event"], "stopped");
}

}  // namespace
}  // namespace glm4
