// Looking at what the model sees: glm4 tokenize (pieces, --decode, standard input, --data records
// with the loss-carrying tokens marked), generate --prompts-file answers labelled with their
// prompts, and evaluate / perplexity on every record layout and data folder train reads.
#include <gtest/gtest.h>

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
using glm4::testing::run_program;
using glm4::testing::run_program_with_input;
using glm4::testing::TempDir;
using json = nlohmann::json;

const std::string kText = "In the beginning";

Result cli(const std::vector<std::string>& args) { return run_program(GLM4_BINARY, args, true); }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(Tokenize, PiecesDecodeAndStandardInput) {
  Result ids = cli({"tokenize", "--model", kModel, "--text", kText});
  ASSERT_EQ(ids.status, 0) << ids.output;
  const std::string list = ids.output.substr(0, ids.output.size() - 1);  // "1,2,3"

  // --pieces: one token a line, its id and its piece; the pieces spell the text.
  Result pieces = cli({"tokenize", "--model", kModel, "--text", kText, "--pieces"});
  ASSERT_EQ(pieces.status, 0) << pieces.output;
  std::string ids_again, spelled;
  for (const std::string& line : lines_of(pieces.output)) {
    const size_t tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    ids_again += (ids_again.empty() ? "" : ",") + line.substr(0, tab);
    spelled += json::parse(line.substr(tab + 1)).get<std::string>();
  }
  EXPECT_EQ(ids_again, list);
  EXPECT_NE(spelled.find("beginning"), std::string::npos) << pieces.output;

  // --decode: ids back to the text.
  Result text = cli({"tokenize", "--model", kModel, "--decode", list});
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_EQ(text.output, kText + "\n");

  // No --text: standard input, without its final newline.
  Result piped =
      run_program_with_input(GLM4_BINARY, {"tokenize", "--model", kModel}, kText + "\n", true);
  ASSERT_EQ(piped.status, 0) << piped.output;
  EXPECT_EQ(piped.output, ids.output);
}

TEST(Tokenize, DataRecordsShowTheTokensThatCarryLoss) {
  TempDir tmp;
  const std::string data = (tmp / "d.jsonl").string();
  std::ofstream(data) << R"({"prompt": "Capital of France?", "completion": " Paris"})"
                      << "\n"
                      << R"({"messages": [{"role": "user", "content": "Capital of Spain?"},)"
                      << R"( {"role": "assistant", "content": "Madrid"}]})"
                      << "\n";
  Result masked = cli({"tokenize", "--model", kModel, "--data", data, "--mask-prompt"});
  ASSERT_EQ(masked.status, 0) << masked.output;
  const std::vector<std::string> lines = lines_of(masked.output);
  ASSERT_EQ(lines.size(), 4u) << masked.output;  // a header and the rendered text per record
  EXPECT_EQ(lines[0].rfind("== " + data + ":1: ", 0), 0u) << lines[0];
  for (const auto& [line, prompt, answer] : {std::tuple{lines[1], "Capital of France?", "Paris"},
                                             std::tuple{lines[3], "Capital of Spain?", "Madrid"}}) {
    const size_t open = line.find("[["), p = line.find(prompt), a = line.find(answer);
    ASSERT_NE(open, std::string::npos) << line;
    EXPECT_LT(p, open) << line;  // the prompt carries no loss with --mask-prompt
    EXPECT_GT(a, open) << line;  // the answer does
    EXPECT_GT(line.find("]]"), a) << line;
  }
  // Without --mask-prompt the prompt carries loss too (everything after [gMASK]<sop>).
  Result all = cli({"tokenize", "--model", kModel, "--data", data});
  const std::vector<std::string> unmasked = lines_of(all.output);
  ASSERT_EQ(unmasked.size(), 4u) << all.output;
  EXPECT_LT(unmasked[1].find("[["), unmasked[1].find("Capital")) << unmasked[1];

  // --pieces: one token a line, marked "loss" or "-".
  Result rows = cli({"tokenize", "--model", kModel, "--data", data, "--mask-prompt", "--pieces"});
  int loss = 0, no_loss = 0;
  for (const std::string& line : lines_of(rows.output)) {
    loss += line.find("\tloss\t") != std::string::npos;
    no_loss += line.find("\t-\t") != std::string::npos;
  }
  EXPECT_GT(loss, 2);
  EXPECT_GT(no_loss, loss);
}

TEST(Tokenize, PromptsFileAnswersCarryTheirPrompt) {
  TempDir tmp;
  const std::string file = (tmp / "p.txt").string();
  std::ofstream(file) << "Once upon a time\n\n{\"prompt\": \"The king said\"}\n";
  Result text = cli({"generate", "--model", kModel, "--prompts-file", file, "--max-tokens", "4"});
  ASSERT_EQ(text.status, 0) << text.output;
  const std::vector<std::string> lines = lines_of(text.output);
  ASSERT_GE(lines.size(), 4u) << text.output;
  EXPECT_EQ(lines[0], "[1] Once upon a time");
  EXPECT_NE(text.output.find("\n\n[2] The king said\n"), std::string::npos) << text.output;

  Result js =
      cli({"generate", "--model", kModel, "--prompts-file", file, "--max-tokens", "4", "--json"});
  ASSERT_EQ(js.status, 0) << js.output;
  const std::vector<std::string> rows = lines_of(js.output);
  ASSERT_EQ(rows.size(), 2u) << js.output;
  EXPECT_EQ(json::parse(rows[0]).value("index", -1), 0);
  EXPECT_EQ(json::parse(rows[0]).value("prompt", ""), "Once upon a time");
  EXPECT_EQ(json::parse(rows[1]).value("index", -1), 1);
  EXPECT_EQ(json::parse(rows[1]).value("prompt", ""), "The king said");
}

// A data folder as train takes it: evaluate and perplexity read its test.jsonl, else valid.jsonl;
// evaluate scores {"prompt", "completion"} records beside chat ones.
TEST(Tokenize, EvaluateAndPerplexityTakeTrainsFoldersAndLayouts) {
  TempDir tmp;
  const std::filesystem::path dir = tmp / "data";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "train.jsonl") << R"({"text": "unused here"})"
                                     << "\n";
  std::ofstream(dir / "valid.jsonl")
      << R"({"prompt": "Capital of France?", "completion": " Paris"})"
      << "\n"
      << R"({"prompt": "Capital of Spain?", "completion": " Madrid"})"
      << "\n"
      << R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]})"
      << "\n";
  Result eval = cli({"evaluate", "--model", kModel, "--data", dir.string(), "--batch-size", "3"});
  ASSERT_EQ(eval.status, 0) << eval.output;
  const json e = json::parse(eval.output);
  EXPECT_EQ(e.value("examples", 0), 3);
  EXPECT_GT(e.value("answer_tokens", 0), 0);

  Result folder = cli({"perplexity", "--model", kModel, "--data", dir.string()});
  Result file = cli({"perplexity", "--model", kModel, "--data", (dir / "valid.jsonl").string()});
  ASSERT_EQ(folder.status, 0) << folder.output;
  EXPECT_EQ(folder.output, file.output);

  std::ofstream(dir / "test.jsonl") << R"({"prompt": "2 + 2 =", "completion": " 4"})"
                                    << "\n";
  Result test = cli({"evaluate", "--model", kModel, "--data", dir.string()});
  ASSERT_EQ(test.status, 0) << test.output;
  EXPECT_EQ(json::parse(test.output).value("examples", 0), 1);
}

}  // namespace
}  // namespace glm4
