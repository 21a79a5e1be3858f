// Inputs are read and checked before the weights: a 30B model takes minutes to load, and a
// mistyped --data, a prompt without a tokenizer or a wrong --adapter must not wait for that. The
// model directories here hold a real config and tokenizer but weights that cannot be read, so an
// error that names the flag (not the weights) shows the check came first.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/support/repo_paths.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using glm4::testing::first_line;
using glm4::testing::kModel;
using glm4::testing::Result;
using glm4::testing::run;
using glm4::testing::TempDir;
namespace fs = std::filesystem;

// The tiny model's config (and its tokenizer when `tokenizer`) beside weights that are not a
// safetensors file.
std::string broken_model(const TempDir& tmp, const std::string& name, bool tokenizer) {
  const fs::path dir = tmp / name;
  fs::create_directories(dir);
  std::vector<std::string> files = {"config.json", "generation_config.json"};
  if (tokenizer) files.insert(files.end(), {"tokenizer.model", "tokenizer_config.json"});
  for (const std::string& f : files) fs::copy_file(fs::path(kModel) / f, dir / f);
  std::ofstream(dir / "model.safetensors") << "not a safetensors file";
  return dir.string();
}

void expect_error(const std::vector<std::string>& args, const std::string& error) {
  Result r = run(args);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_EQ(first_line(r), "glm4: error: " + error) << r.output;
}

TEST(CliEarlyErrors, TheWeightsAreReadAfterTheInputsCheckedHere) {
  TempDir tmp;
  const std::string model = broken_model(tmp, "m", true);
  // The control: with every input right, the run gets to the weights and fails there.
  Result weights = run({"generate", "--model", model, "--tokens", "1,2"});
  EXPECT_EQ(weights.status, 1);
  EXPECT_NE(first_line(weights).find("model.safetensors"), std::string::npos) << weights.output;
  Result train_weights = run({"train", "--model", model, "--data", glm4::testing::kFinetune,
                              "--out", (tmp / "run0").string(), "--iters", "1"});
  EXPECT_EQ(first_line(train_weights).rfind("glm4: error: --model " + model + ": ", 0), 0u)
      << train_weights.output;
  EXPECT_NE(first_line(train_weights).find("model.safetensors"), std::string::npos);

  const std::string missing = (tmp / "missing.jsonl").string();
  expect_error({"generate", "--model", model, "--prompts-file", missing},
               "--prompts-file " + missing + ": no such file");
  expect_error({"generate", "--model", model, "--tokens", "1,2,99999"},
               "--tokens: token id 99999 is outside the vocabulary of 4000 tokens");
  const std::string schema = (tmp / "schema.json").string();
  std::ofstream(schema) << "{\"type\": \"object\",";
  expect_error({"generate", "--model", model, "--prompt", "hi", "--json-schema", schema},
               "--json-schema " + schema + ": not valid JSON");
  const std::string adapter = (tmp / "no_adapter").string();
  expect_error({"generate", "--model", model, "--tokens", "1", "--adapter", adapter},
               "--adapter: adapter \"" + adapter + "\": not a directory");
  expect_error({"serve", "--model", model, "--adapter", "tuned=" + adapter},
               "--adapter tuned=" + adapter + ": adapter \"" + adapter + "\": not a directory");
  expect_error({"evaluate", "--model", model, "--data", missing},
               "--data: cannot open data file '" + missing + "'");
  expect_error({"perplexity", "--model", model, "--data", missing},
               "--data: cannot open data file '" + missing + "'");
  expect_error({"classify", "--model", model, "--data", missing, "--labels", "yes,no"},
               "--data: cannot open data file '" + missing + "'");
  expect_error({"export", "gguf", "--model", model, "--adapter", adapter, "--out",
                (tmp / "m.gguf").string()},
               "--adapter: adapter \"" + adapter + "\": not a directory");
  expect_error({"train", "--model", model, "--data", glm4::testing::kFinetune, "--out",
                (tmp / "run").string(), "--init-adapter", adapter},
               "--init-adapter " + adapter + ": adapter \"" + adapter + "\": not a directory");
  const fs::path bad_data = tmp / "bad_data";
  fs::create_directories(bad_data);
  std::ofstream(bad_data / "train.jsonl") << "{\"text\": \"fine\"}\n{\"text\": \n";
  Result train = run(
      {"train", "--model", model, "--data", bad_data.string(), "--out", (tmp / "run").string()});
  EXPECT_EQ(train.status, 1);
  EXPECT_EQ(first_line(train).rfind(
                "glm4: error: " + (bad_data / "train.jsonl").string() + ":2: invalid JSON", 0),
            0u)
      << train.output;
  const std::string texts = (tmp / "texts.jsonl").string();
  std::ofstream(texts) << "{\"text\": \"no answer here\"}\n";
  Result records = run({"evaluate", "--model", model, "--data", texts});
  EXPECT_EQ(records.status, 1);
  EXPECT_EQ(first_line(records).rfind(
                "glm4: error: --data: " + texts + ":1: evaluate needs records with an answer", 0),
            0u)
      << records.output;
}

// Without tokenizer files, what needs one says so at once, and names --tokens only where the
// command takes token ids instead.
TEST(CliEarlyErrors, AMissingTokenizerIsNamedBeforeTheWeights) {
  TempDir tmp;
  const std::string model = broken_model(tmp, "m", false);
  const std::string none =
      "--model " + model + ": no tokenizer.json or tokenizer.model, needed for ";
  expect_error({"generate", "--model", model, "--prompt", "hi"},
               none + "--prompt (pass token ids with --tokens instead)");
  expect_error({"generate", "--model", model, "--prompt", "hi", "--chat"},
               none + "--chat (pass token ids with --tokens instead)");
  expect_error({"logits", "--model", model, "--text", "hi", "--out", (tmp / "l.npy").string()},
               none + "--text (pass token ids with --tokens instead)");
  expect_error({"chat", "--model", model}, none + "chat");
  expect_error({"serve", "--model", model}, none + "serve");
  expect_error({"evaluate", "--model", model, "--data", glm4::testing::kFinetune},
               none + "evaluate");
  expect_error(
      {"classify", "--model", model, "--data", (tmp / "d.jsonl").string(), "--labels", "yes,no"},
      none + "classify");
}

// A port another server listens on is named before the model loads.
TEST(CliEarlyErrors, ABusyPortIsNamedBeforeTheWeights) {
  TempDir tmp;
  const std::string model = broken_model(tmp, "m", true);
  const int held = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(held, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;  // any free port
  ASSERT_EQ(bind(held, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(held, 1), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(getsockname(held, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  expect_error({"serve", "--model", model, "--host", "127.0.0.1", "--port", port},
               "--host 127.0.0.1 --port " + port +
                   ": cannot listen on this address: Address already in use");
  close(held);
}

}  // namespace
}  // namespace glm4
