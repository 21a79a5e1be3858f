// LoRA fine-tuning on tool-calling records through the CLI, on the embedded model: `glm4 tokenize
// --data --pieces` shows the loss mask token by token (the calls and answers carry loss, tool
// results never do), and `glm4 train` trains on exactly those tokens (its target count is the
// marked count) with a finite, falling loss.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/support/repo_paths.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using glm4::testing::kModel;
using glm4::testing::Result;
using glm4::testing::run;
using glm4::testing::succeeds;
using glm4::testing::TempDir;
namespace fs = std::filesystem;
using nlohmann::json;

const char* kRecords[] = {
    R"({"tools": [{"type": "function", "function": {"name": "get_weather", "parameters": )"
    R"({"type": "object", "properties": {"city": {"type": "string"}}}}}], "messages": [)"
    R"({"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": null, )"
    R"("tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", )"
    R"("arguments": "{\"city\": \"Paris\"}"}}]}, {"role": "tool", "tool_call_id": "c1", )"
    R"("content": "zzsunnyzz"}, {"role": "assistant", "content": "It is sunny."}]})",
    R"({"tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}], )"
    R"("messages": [{"role": "user", "content": "Rome?"}, {"role": "assistant", "content": "", )"
    R"("tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]}, )"
    R"({"role": "tool", "content": "zzrainzz"}, {"role": "assistant", "content": "Rain."}]})",
    R"({"messages": [{"role": "system", "content": "", "tools": [{"type": "function", )"
    R"("function": {"name": "get_weather", "parameters": {}}}]}, {"role": "user", "content": )"
    R"("Oslo?"}, {"role": "assistant", "content": "{\"name\": \"get_weather\", \"arguments\": )"
    R"({\"city\": \"Oslo\"}}"}, {"role": "observation", "content": "zzsnowzz"}, )"
    R"({"role": "assistant", "content": "Snow."}]})"};

struct Row {
  bool loss;
  std::string piece;
};

// tokenize --pieces rows after the header: "id\tloss|-\t\"piece\"".
std::vector<std::vector<Row>> records_of(const std::string& output) {
  std::vector<std::vector<Row>> out;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("== ", 0) == 0) {
      out.emplace_back();
      continue;
    }
    const size_t a = line.find('\t'), b = line.find('\t', a + 1);
    if (a == std::string::npos || b == std::string::npos || out.empty()) continue;
    out.back().push_back({line.substr(a + 1, b - a - 1) == "loss",
                          json::parse(line.substr(b + 1)).get<std::string>()});
  }
  return out;
}

TEST(ToolTraining, LossMaskByTokenAndALoraRun) {
  TempDir tmp;
  const fs::path dir = tmp / "data";
  fs::create_directories(dir);
  {
    std::ofstream train(dir / "train.jsonl"), valid(dir / "valid.jsonl");
    for (const char* r : kRecords) train << r << "\n", valid << r << "\n";
  }
  int64_t marked = 0;
  for (bool mask : {true, false}) {
    std::vector<std::string> args = {"tokenize", "--model",    kModel,
                                     "--data",   dir.string(), "--pieces"};
    if (mask) args.push_back("--mask-prompt");
    Result tok = run(args);
    ASSERT_TRUE(succeeds(tok));
    const auto records = records_of(tok.output);
    ASSERT_EQ(records.size(), 3u) << tok.output;
    for (const auto& rows : records) {
      std::string loss_text, no_loss_text;
      for (const Row& r : rows) (r.loss ? loss_text : no_loss_text) += r.piece;
      if (mask)
        marked +=
            int64_t(std::count_if(rows.begin(), rows.end(), [](const Row& r) { return r.loss; }));
      // The call (name and arguments) and the final answer carry loss ...
      EXPECT_NE(loss_text.find("get_weather"), std::string::npos) << loss_text;
      EXPECT_NE(loss_text.find("city"), std::string::npos) << loss_text;
      EXPECT_NE(loss_text.find("."), std::string::npos) << loss_text;
      // ... the tool's answers ("zz...zz") never, with or without --mask-prompt.
      EXPECT_EQ(loss_text.find("zz"), std::string::npos) << loss_text;
      EXPECT_NE(no_loss_text.find("zz"), std::string::npos) << no_loss_text;
      if (mask) {  // the user turns carry no loss either
        EXPECT_EQ(loss_text.find("?"), std::string::npos) << loss_text;
      }
    }
  }

  Result train = run({"train",
                      "--model",
                      kModel,
                      "--data",
                      dir.string(),
                      "--out",
                      (tmp / "run").string(),
                      "--iters",
                      "8",
                      "--batch-size",
                      "3",
                      "--mask-prompt",
                      "--learning-rate",
                      "5e-3",
                      "--steps-per-eval",
                      "8",
                      "--val-batches",
                      "1",
                      "--steps-per-report",
                      "1"});
  ASSERT_TRUE(succeeds(train));
  std::vector<json> lines;
  {
    std::ifstream in(tmp / "run" / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  }
  ASSERT_FALSE(lines.empty());
  // The trainer's targets are the tokens tokenize marked.
  EXPECT_EQ(lines[0]["target_tokens"].get<int64_t>(), marked);
  std::vector<double> loss;
  for (const json& j : lines)
    if (j.contains("loss")) loss.push_back(j["loss"]);
  ASSERT_EQ(loss.size(), 8u);
  for (double l : loss) EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(loss.back(), loss.front());  // the same 3 records every step: it learns them
}

}  // namespace
}  // namespace glm4
