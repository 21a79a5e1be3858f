// glm4 classify on the embedded model (models/glm4-tiny): each label's log-probability equals the
// answer loss the library's score_loss gives the record with that label as its answer; accuracy,
// per-task accuracy and the confusion count on data whose answers are known; bad inputs named.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dataset/records.h"
#include "dataset/text_encoder.h"
#include "infer/score.h"
#include "io/tokenizer/chat_template.h"
#include "io/tokenizer/tokenizer.h"
#include "tests/support/repo_paths.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using glm4::testing::run;
using glm4::testing::run_program;
using glm4::testing::succeeds;
using glm4::testing::TempDir;
using json = nlohmann::json;
namespace fs = std::filesystem;

using glm4::testing::kModel;
const std::vector<std::string> kLabels = {"Bible", "Jargon File", "Tang poem"};
const std::string kLabelFlag = "Bible,Jargon File, Tang poem";  // spaces around a label are trimmed

json chat(const std::vector<std::pair<std::string, std::string>>& turns,
          const std::string& task = "") {
  json messages = json::array();
  for (const auto& [role, content] : turns)
    messages.push_back({{"role", role}, {"content", content}});
  json r = {{"messages", messages}};
  if (!task.empty()) r["task"] = task;
  return r;
}

void write_lines(const fs::path& path, const std::vector<json>& records) {
  std::ofstream out(path);
  for (const json& r : records) out << r.dump() << "\n";
}

std::vector<json> read_lines(const fs::path& path) {
  std::ifstream in(path);
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

struct LogProb {
  double value = 0;
  int64_t tokens = 0;
};

// log p(answer | prompt) as the library scores training data: the record with `label` as its
// answer, tokenised with the prompt masked, and the token-weighted loss of that one example.
// Earlier assistant turns are masked by hand: only the tokens after the rendered prompt count.
LogProb library_log_prob(const json& record, const std::string& label, const TextEncoder& encoder,
                         const Glm4Model& model, const Tokenizer& tokenizer) {
  json r = record;
  size_t prompt_len = 0;
  if (r.contains("messages")) {
    r["messages"].back()["content"] = label;
    std::vector<ChatMessage> context;
    for (size_t i = 0; i + 1 < r["messages"].size(); ++i)
      context.push_back({r["messages"][i]["role"], r["messages"][i]["content"]});
    prompt_len = render_chat(tokenizer, detect_chat_format(tokenizer), context, true).ids.size();
  } else {
    r["completion"] = label;
  }
  Example ex = make_example(parse_record(r.dump()), encoder, {.mask_prompt = true});
  for (size_t t = 0; t < prompt_len; ++t) ex.labels[t] = kIgnoreLabel;
  LossScore s = score_loss(model, {ex}, 1);
  return {-s.loss * double(s.tokens), s.tokens};
}

std::vector<json> sample_records() {
  return {
      chat({{"user", "Which text is this passage from? In the beginning God created the heaven."},
            {"assistant", "Bible"}},
           "source"),
      chat({{"user", "Which text is this? A hacker is a person who enjoys exploring programs."},
            {"assistant", "Jargon File"}},
           "source"),
      chat({{"user", "Where is this from? 床前明月光"}, {"assistant", "Tang poem"}}, "source"),
      // a few-shot record: the first answer is prompt, only the last one is classified
      chat({{"user", "Source? And God said, Let there be light"},
            {"assistant", "Bible"},
            {"user", "Source? 春眠不觉晓"},
            {"assistant", "Tang poem"}},
           "shots"),
      {{"prompt", "Source of: foo and bar are metasyntactic variables. Answer:"},
       {"completion", "Jargon File"},
       {"task", "plain"}}};
}

TEST(ClassifyCommand, LabelLogProbsEqualTheLibrarysAnswerLoss) {
  TempDir tmp;
  std::vector<json> records = sample_records();
  write_lines(tmp / "data.jsonl", records);
  auto model = load_model(kModel);
  auto tokenizer = load_tokenizer(kModel);
  TextEncoder encoder = make_text_encoder(kModel);
  for (const char* batch : {"1", "2", "8"}) {
    const fs::path predictions = tmp / (std::string("p") + batch + ".jsonl");
    auto r = run_program(GLM4_BINARY,
                         {"classify", "--model", kModel, "--data", (tmp / "data.jsonl").string(),
                          "--labels", kLabelFlag, "--batch-size", batch, "--predictions",
                          predictions.string(), "--compute", "f32"},
                         true);
    ASSERT_TRUE(succeeds(r)) << r.output;
    json report = json::parse(r.output);
    EXPECT_EQ(report["compute"], "f32");  // what ran, as in the train log and generate --json
    EXPECT_EQ(report["kernel"], "fp32");
    std::vector<json> rows = read_lines(predictions);
    ASSERT_EQ(rows.size(), records.size());
    for (size_t i = 0; i < records.size(); ++i) {
      EXPECT_EQ(rows[i]["line"], int64_t(i) + 1);
      double best = -1e300;
      std::string best_label;
      for (const std::string& label : kLabels) {
        double got = rows[i]["log_probs"][label];
        double want = library_log_prob(records[i], label, encoder, *model, *tokenizer).value;
        EXPECT_NEAR(got, want, 1e-5 * std::max(1.0, std::abs(want)))
            << "record " << i << " label " << label << " batch " << batch;
        EXPECT_LT(got, 0.0);
        if (got > best) best = got, best_label = label;
      }
      EXPECT_EQ(rows[i]["predicted"], best_label);
    }
  }
}

TEST(ClassifyCommand, AccuracyPerTaskAndConfusionOnKnownAnswers) {
  TempDir tmp;
  std::vector<json> records = sample_records();
  for (json& r : records) r["task"] = "probe";
  write_lines(tmp / "probe.jsonl", records);
  auto probe = run_program(GLM4_BINARY,
                           {"classify", "--model", kModel, "--data", (tmp / "probe.jsonl").string(),
                            "--labels", kLabelFlag, "--predictions", (tmp / "p.jsonl").string()},
                           true);
  ASSERT_TRUE(succeeds(probe)) << probe.output;
  std::vector<json> rows = read_lines(tmp / "p.jsonl");
  // Known answers: records 0 and 1 (task "right") and 2 (task "mixed") get the label the model
  // prefers; 3 and 4 (task "mixed") another one. So 3 of 5 right, "right" 2 of 2, "mixed" 1 of 3.
  std::vector<std::string> answers;
  std::map<std::string, std::map<std::string, int>> confusion;
  for (size_t i = 0; i < records.size(); ++i) {
    std::string predicted = rows[i]["predicted"];
    std::string answer = predicted;
    if (i >= 3) answer = predicted == kLabels[0] ? kLabels[1] : kLabels[0];
    if (records[i].contains("messages"))
      records[i]["messages"].back()["content"] = answer;
    else
      records[i]["completion"] = answer;
    records[i]["task"] = i < 2 ? "right" : "mixed";
    ++confusion[answer][predicted];
    answers.push_back(answer);
  }
  write_lines(tmp / "known.jsonl", records);
  auto r = run_program(GLM4_BINARY,
                       {"classify", "--model", kModel, "--data", (tmp / "known.jsonl").string(),
                        "--labels", kLabelFlag, "--predictions", (tmp / "k.jsonl").string()},
                       true);
  ASSERT_TRUE(succeeds(r)) << r.output;
  json j = json::parse(r.output);
  EXPECT_EQ(j["examples"], 5);
  EXPECT_EQ(j["labels"], json(kLabels));
  EXPECT_DOUBLE_EQ(double(j["accuracy"]), 0.6);
  EXPECT_DOUBLE_EQ(double(j["accuracy_by_task"]["right"]), 1.0);
  EXPECT_DOUBLE_EQ(double(j["accuracy_by_task"]["mixed"]), 1.0 / 3.0);
  for (const std::string& a : kLabels)
    for (const std::string& p : kLabels)
      EXPECT_EQ(j["confusion"][a][p], confusion[a][p]) << a << " -> " << p;
  std::vector<json> known = read_lines(tmp / "k.jsonl");
  auto model = load_model(kModel);
  auto tokenizer = load_tokenizer(kModel);
  TextEncoder encoder = make_text_encoder(kModel);
  double nll = 0;
  int64_t tokens = 0;
  for (size_t i = 0; i < known.size(); ++i) {
    EXPECT_EQ(known[i]["answer"], answers[i]);
    EXPECT_EQ(known[i]["predicted"], rows[i]["predicted"]);  // answers do not change the scores
    nll -= double(known[i]["log_probs"][answers[i]]);
    tokens += library_log_prob(records[i], answers[i], encoder, *model, *tokenizer).tokens;
  }
  // Nats per answer token; the log-probabilities are floats, printed in their shortest form.
  EXPECT_NEAR(double(j["answer_loss"]), nll / double(tokens), 1e-6);

  // --task keeps one task's records; without answers only the predictions are counted.
  auto one = run_program(GLM4_BINARY,
                         {"classify", "--model", kModel, "--data", (tmp / "known.jsonl").string(),
                          "--labels", kLabelFlag, "--task", "right"},
                         true);
  ASSERT_TRUE(succeeds(one)) << one.output;
  EXPECT_EQ(json::parse(one.output)["examples"], 2);
  EXPECT_DOUBLE_EQ(double(json::parse(one.output)["accuracy"]), 1.0);
  write_lines(tmp / "open.jsonl", {chat({{"user", "Where is this from? 床前明月光"}}),
                                   chat({{"user", "Which text? In the beginning was the Word"}})});
  auto open = run_program(GLM4_BINARY,
                          {"classify", "--model", kModel, "--data", (tmp / "open.jsonl").string(),
                           "--labels", kLabelFlag},
                          true);
  ASSERT_TRUE(succeeds(open)) << open.output;
  json o = json::parse(open.output);
  EXPECT_FALSE(o.contains("accuracy"));
  int64_t counted = 0;
  for (const std::string& label : kLabels) counted += int64_t(o["predicted"][label]);
  EXPECT_EQ(counted, 2);
}

TEST(ClassifyCommand, NamesBadInputs) {
  TempDir tmp;
  const std::string data = (tmp / "data.jsonl").string();
  auto classify = [&](const std::string& labels) {
    return run({"classify", "--model", kModel, "--data", data, "--labels", labels});
  };
  auto expect_error = [](const glm4::testing::Result& r, const std::vector<std::string>& parts) {
    EXPECT_EQ(r.status, 1) << r.output;
    for (const std::string& p : parts)
      EXPECT_NE(r.output.find(p), std::string::npos) << p << "\n" << r.output;
  };
  write_lines(data, {chat({{"user", "a?"}, {"assistant", "Bible"}}),
                     chat({{"user", "b?"}, {"assistant", "Koran"}})});
  expect_error(classify(kLabelFlag), {"data.jsonl:2:", "\"Koran\" is not one of --labels"});
  expect_error(classify(""), {"--labels", "empty label"});
  expect_error(classify("Bible,,Tang poem"), {"--labels", "empty label"});
  expect_error(classify("Bible,Bible"), {"--labels", "\"Bible\" appears twice"});
  write_lines(data, {chat({{"user", "a?"}, {"assistant", "Bible"}}), chat({{"user", "b?"}})});
  expect_error(classify(kLabelFlag), {"data.jsonl:2:", "no answer", "line 1", "accuracy needs"});
  write_lines(data, {{{"text", "In the beginning"}}});
  expect_error(classify(kLabelFlag), {"data.jsonl:1:", "classify needs"});
  write_lines(data, {chat({{"user", "a?"}, {"assistant", "Bible"}}, "x")});
  expect_error(
      run({"classify", "--model", kModel, "--data", data, "--labels", kLabelFlag, "--task", "y"}),
      {"no records of --task y"});
  expect_error(run({"classify", "--model", kModel, "--data", data, "--labels", kLabelFlag,
                    "--batch-size", "0"}),
               {"--batch-size"});
}

}  // namespace
}  // namespace glm4
