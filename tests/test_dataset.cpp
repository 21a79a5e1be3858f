// Training data (dataset/): locating files, parsing and checking JSONL records (every error names
// file:line), tokenisation rules and labels, truncation (batching: test_batch_iterator.cpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "base/check.h"
#include "dataset/batch.h"
#include "dataset/dataset.h"
#include "tests/support/expect_error.h"

namespace glm4 {
namespace {

namespace fs = std::filesystem;

using glm4::testing::expect_error;

// A scratch directory per test.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           str_cat("glm4_train_data_", ::getpid(), "_", info->test_suite_name(), "_", info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~TempDir() { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& content) const {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }
  std::string path() const { return dir_.string(); }

 private:
  fs::path dir_;
};

// A toy tokenizer: one id per byte, role tokens, and a GLM-4-like template in which an
// assistant turn's content and the role token that follows it are the targets.
constexpr int32_t kGmask = 900, kSop = 901, kEos = 999;
const std::map<std::string, int32_t> kRoleIds = {
    {"system", 910}, {"user", 911}, {"assistant", 912}, {"observation", 913}};

std::vector<int32_t> bytes(std::string_view s) {
  std::vector<int32_t> ids;
  for (unsigned char c : s) ids.push_back(int32_t(c));
  return ids;
}

RenderedChat render(const std::vector<ChatMessage>& msgs, const ChatOptions& = {}) {
  RenderedChat r;
  auto add = [&](int32_t id, bool target) {
    r.ids.push_back(id);
    r.target.push_back(target);
  };
  add(kGmask, false);
  add(kSop, false);
  bool after_assistant = false;
  for (const ChatMessage& m : msgs) {
    add(kRoleIds.at(m.role), after_assistant);
    const bool assistant = m.role == "assistant";
    for (int32_t id : bytes(m.content)) add(id, assistant);
    after_assistant = assistant;
  }
  return r;
}

TextEncoder toy_encoder() {
  TextEncoder e;
  e.encode = bytes;
  e.render_chat = render;
  e.prefix_ids = {kGmask, kSop};
  e.eos_id = kEos;
  return e;
}

Example example_from(const std::string& line, bool mask_prompt = false) {
  DatasetOptions o;
  o.mask_prompt = mask_prompt;
  return make_example(parse_record(line), toy_encoder(), o);
}

std::vector<int32_t> cat(std::vector<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}
std::vector<int32_t> ignored(size_t n) { return std::vector<int32_t>(n, kIgnoreLabel); }

// --- files ---

TEST(DataFiles, DirectoryWithTrainAndOptionalSplits) {
  TempDir d;
  d.write("train.jsonl", "{\"text\": \"a\"}\n");
  d.write("valid.jsonl", "{\"text\": \"b\"}\n");
  DataFiles f = resolve_data_path(d.path());
  EXPECT_EQ(f.train, d.path() + "/train.jsonl");
  EXPECT_EQ(f.valid, d.path() + "/valid.jsonl");
  EXPECT_EQ(f.test, "");
  const std::string file = d.write("other.jsonl", "{\"text\": \"c\"}\n");
  EXPECT_EQ(resolve_data_path(file).train, file);
  EXPECT_EQ(resolve_data_path(file).valid, "");
}

TEST(DataFiles, MissingPathOrTrainFileIsAnError) {
  TempDir d;
  expect_error([&] { resolve_data_path(d.path()); },
               "data directory '" + d.path() + "' has no train.jsonl");
  expect_error([&] { resolve_data_path(d.path() + "/nope"); },
               "data path '" + d.path() + "/nope' does not exist");
}

// --- tokenisation rules ---

TEST(Examples, TextIsPrefixTextEosWithEverythingAfterThePrefixATarget) {
  Example ex = example_from(R"({"text": "hi"})");
  EXPECT_EQ(ex.ids, cat({{kGmask, kSop}, bytes("hi"), {kEos}}));
  EXPECT_EQ(ex.labels, cat({ignored(2), bytes("hi"), {kEos}}));
  EXPECT_EQ(count_targets(ex), 3);
}

TEST(Examples, PromptCompletionMasksThePromptOnlyWhenAsked) {
  const std::string line = R"({"prompt": "ab", "completion": "cd"})";
  const auto ids = cat({{kGmask, kSop}, bytes("ab"), bytes("cd"), {kEos}});
  Example all = example_from(line, false);
  EXPECT_EQ(all.ids, ids);
  EXPECT_EQ(all.labels, cat({ignored(2), bytes("ab"), bytes("cd"), {kEos}}));
  Example masked = example_from(line, true);
  EXPECT_EQ(masked.ids, ids);
  EXPECT_EQ(masked.labels, cat({ignored(4), bytes("cd"), {kEos}}));
  EXPECT_EQ(count_targets(masked), 3);
}

TEST(Examples, ChatUsesTheTemplatesTargetMaskOnlyWhenMaskingPrompts) {
  const std::string line =
      R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},)"
      R"( {"role": "assistant", "content": "ok"}, {"role": "user", "content": "r"}]})";
  const auto ids = cat(
      {{kGmask, kSop, 910}, bytes("s"), {911}, bytes("q"), {912}, bytes("ok"), {911}, bytes("r")});
  Example masked = example_from(line, true);
  EXPECT_EQ(masked.ids, ids);  // no eos: the template ends turns itself
  EXPECT_EQ(masked.labels, cat({ignored(7), bytes("ok"), {911}, ignored(1)}));
  Example all = example_from(line, false);
  EXPECT_EQ(all.labels, cat({ignored(2), std::vector<int32_t>(ids.begin() + 2, ids.end())}));
}

TEST(Examples, ChatWithoutTheLeadingPrefixTrainsOnEveryToken) {
  TextEncoder e = toy_encoder();
  e.render_chat = [](const std::vector<ChatMessage>& m, const ChatOptions&) {
    RenderedChat r = render(m);
    r.ids.erase(r.ids.begin(), r.ids.begin() + 2);
    r.target.erase(r.target.begin(), r.target.begin() + 2);
    return r;
  };
  Example ex = make_example(parse_record(R"({"messages": [{"role": "user", "content": "x"}]})"), e,
                            DatasetOptions{});
  EXPECT_EQ(ex.labels, ex.ids);
}

TEST(Examples, TokenRecordsPassThroughWithLabelsDefaultingToIds) {
  Example a = example_from(R"({"input_ids": [5, 6, 7]})", true);
  EXPECT_EQ(a.ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(a.labels, a.ids);
  Example b = example_from(R"({"input_ids": [5, 6, 7], "labels": [-100, -100, 7]})");
  EXPECT_EQ(b.labels, (std::vector<int32_t>{-100, -100, 7}));
  EXPECT_EQ(count_targets(b), 1);
  EXPECT_EQ(count_targets(a), 2);  // labels[0] is never a target
}

TEST(Records, AssistantTurnsMayCarryReasoningContent) {
  const Record r =
      parse_record(R"({"messages": [{"role": "user", "content": "q"},)"
                   R"( {"role": "assistant", "content": "a", "reasoning_content": "because"},)"
                   R"( {"role": "assistant", "content": "b", "reasoning_content": null}]})");
  EXPECT_EQ(r.messages[0].reasoning_content, std::nullopt);
  EXPECT_EQ(r.messages[1].reasoning_content, "because");
  EXPECT_EQ(r.messages[2].reasoning_content, std::nullopt);  // null is not given
}

TEST(Records, AnOptionalTaskKeyIsKeptForPerTaskScores) {
  EXPECT_EQ(parse_record(R"({"text": "a", "task": "add"})").task, "add");
  EXPECT_EQ(parse_record(R"({"text": "a"})").task, "");
}

// --- loading and errors ---

Dataset load(const TempDir& d, const std::string& content, DatasetOptions o = {}) {
  return load_dataset(d.write("data.jsonl", content), toy_encoder(), o);
}

TEST(LoadDataset, SkipsBlankLinesAndToleratesCrlfAndBom) {
  TempDir d;
  Dataset ds = load(d, "\xEF\xBB\xBF{\"text\": \"a\"}\r\n\n   \n{\"text\": \"bc\"}\r\n");
  ASSERT_EQ(ds.examples.size(), 2u);
  EXPECT_EQ(ds.examples[1].ids, cat({{kGmask, kSop}, bytes("bc"), {kEos}}));
  EXPECT_EQ(ds.target_tokens, 2 + 3);
  EXPECT_EQ(ds.path, d.path() + "/data.jsonl");
}

// A line longer than kMaxRecordLineBytes is refused with file:line and the limit's name
// (a file without newlines must not be read whole into one string); one at the limit is read.
TEST(Records, LinesLongerThanTheLimitAreRefused) {
  TempDir d;
  const std::string ok = "{\"text\": \"" + std::string(kMaxRecordLineBytes - 12, 'a') + "\"}";
  ASSERT_EQ(ok.size(), kMaxRecordLineBytes);
  const std::string path = d.write("long.jsonl", "{\"text\": \"x\"}\n" + ok + "\n" + ok + "b\n");
  int64_t seen = 0;
  expect_error([&] { for_each_record(path, [&](const Record&, int64_t) { ++seen; }); },
               "long.jsonl:3: line is longer than 16777216 bytes (limit kMaxRecordLineBytes)");
  EXPECT_EQ(seen, 2);
}

TEST(LoadDataset, TruncatesToMaxSeqLengthAndCountsIt) {
  TempDir d;
  DatasetOptions o;
  o.max_seq_length = 5;
  o.mask_prompt = true;
  Dataset ds = load(d,
                    "{\"text\": \"abcdef\"}\n{\"text\": \"a\"}\n"
                    "{\"prompt\": \"long prompt\", \"completion\": \"x\"}\n",
                    o);
  EXPECT_EQ(ds.truncated, 2);
  EXPECT_EQ(ds.examples[0].ids, cat({{kGmask, kSop}, bytes("abc")}));
  EXPECT_EQ(ds.examples[0].labels.size(), 5u);
  EXPECT_EQ(ds.examples[1].ids.size(), 4u);
  EXPECT_EQ(ds.without_targets, 1);  // the completion was cut away
}

struct BadLine {
  std::string line;
  std::string message;
};

TEST(LoadDataset, EveryBadRecordIsReportedWithFileAndLine) {
  const std::vector<BadLine> cases = {
      {"{\"text\": \"a\"", "invalid JSON at column 13: syntax error while parsing object"},
      {"{\"text\": \"a\" x}", "invalid JSON at column 14: syntax error"},
      {"[1, 2]", "expected a JSON object, got array"},
      {"{\"foo\": 1, \"bar\": 2}", "unknown record shape (keys: \"bar\", \"foo\")"},
      {"{}", "unknown record shape (keys: none)"},
      {"{\"text\": \"a\", \"input_ids\": [1]}", "record mixes shapes"},
      {"{\"text\": 5}", "\"text\" must be a string, got number"},
      {"{\"text\": \"a\", \"task\": 1}", "\"task\" must be a string, got number"},
      {"{\"prompt\": \"a\"}", "\"prompt\" without \"completion\""},
      {"{\"completion\": \"a\"}", "\"completion\" without \"prompt\""},
      {"{\"prompt\": \"a\", \"completion\": null}", "\"completion\" must be a string, got null"},
      {"{\"messages\": \"hi\"}", "\"messages\" must be an array, got string"},
      {"{\"messages\": []}", "\"messages\" is empty"},
      {"{\"messages\": [\"hi\"]}", "\"messages\"[0] must be an object, got string"},
      {"{\"messages\": [{\"content\": \"x\"}]}", "\"messages\"[0] has no \"role\""},
      {"{\"messages\": [{\"role\": \"user\"}]}", "\"messages\"[0] has no \"content\""},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", "
       "\"content\": 3}]}",
       "\"messages\"[1].content must be a string, got number"},
      {"{\"messages\": [{\"role\": \"bot\", \"content\": \"x\"}]}",
       "\"messages\"[0] has unknown role \"bot\""},
      {"{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\", \"reasoning_content\": 1}]}",
       "\"messages\"[0].reasoning_content must be a string, got number"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"reasoning_content\": \"r\"}]}",
       "\"messages\"[0].reasoning_content: only an assistant turn has one (this one is \"user\")"},
      {"{\"input_ids\": 3}", "\"input_ids\" must be an array of integers, got number"},
      {"{\"input_ids\": []}", "\"input_ids\" is empty"},
      {"{\"input_ids\": [1, 2.5]}", "\"input_ids\"[1] must be an integer, got number 2.5"},
      {"{\"input_ids\": [1, true]}", "\"input_ids\"[1] must be an integer, got boolean"},
      {"{\"input_ids\": [-1]}", "\"input_ids\"[0] = -1 is out of range"},
      {"{\"input_ids\": [1099511627776]}", "\"input_ids\"[0] = 1099511627776 is out of range"},
      {"{\"input_ids\": [1, 2], \"labels\": [1]}",
       "\"labels\" has 1 entries but \"input_ids\" has 2"},
      {"{\"input_ids\": [1, 2], \"labels\": [1, -5]}",
       "\"labels\"[1] = -5 is out of range (expected -100 or a token id"},
      {"{\"input_ids\": [1, 5000]}",
       "token id 5000 at position 1 is outside the vocabulary (size 1000)"},
      {"{\"input_ids\": [1, 2], \"labels\": [1, 1000]}",
       "label 1000 at position 1 is outside the vocabulary (size 1000)"},
  };
  TempDir d;
  DatasetOptions o;
  o.vocab_size = 1000;
  for (const BadLine& c : cases) {
    // The bad record sits on line 4, after a good record and two blank lines.
    const std::string file = d.write("bad.jsonl", "{\"text\": \"fine\"}\n\n\n" + c.line + "\n");
    expect_error([&] { load_dataset(file, toy_encoder(), o); }, file + ":4: " + c.message);
  }
}

TEST(LoadDataset, TokenizerProblemsAreReportedWithFileAndLine) {
  TempDir d;
  const std::string file =
      d.write("x.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n");
  TextEncoder no_chat = toy_encoder();
  no_chat.render_chat = nullptr;
  expect_error([&] { load_dataset(file, no_chat, {}); },
               file + ":1: chat records need a chat template");
  TextEncoder throwing = toy_encoder();
  throwing.render_chat = [](const std::vector<ChatMessage>&, const ChatOptions&) -> RenderedChat {
    throw std::runtime_error("template exploded");
  };
  expect_error([&] { load_dataset(file, throwing, {}); }, file + ":1: template exploded");
  TextEncoder bad_mask = toy_encoder();
  bad_mask.render_chat = [](const std::vector<ChatMessage>& m, const ChatOptions&) {
    RenderedChat r = render(m);
    r.target.pop_back();
    return r;
  };
  expect_error([&] { load_dataset(file, bad_mask, {}); },
               file + ":1: the chat template returned 4 ids but 3 target flags");
  const std::string text = d.write("t.jsonl", "{\"text\": \"a\"}\n");
  TextEncoder no_eos = toy_encoder();
  no_eos.eos_id = -1;
  expect_error([&] { load_dataset(text, no_eos, {}); },
               text + ":1: text records need an end-of-sequence token");
}

TEST(LoadDataset, EmptyOrMissingFilesAreErrorsNamingTheFile) {
  TempDir d;
  const std::string empty = d.write("empty.jsonl", "\n  \n");
  expect_error([&] { load_dataset(empty, toy_encoder(), {}); },
               "data file '" + empty + "' holds no records");
  expect_error([&] { load_dataset(d.path() + "/missing.jsonl", toy_encoder(), {}); },
               "cannot open data file '" + d.path() + "/missing.jsonl'");
}

}  // namespace
}  // namespace glm4
