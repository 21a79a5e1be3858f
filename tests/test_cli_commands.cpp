// Command-level tests of chat (and its format choice), plot, tokenizer train and evaluate's exact
// match on the embedded model (models/glm4-tiny), each against what the library computes or a
// hand-made input.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "autograd/node.h"
#include "infer/generator.h"
#include "io/tokenizer/chat_template.h"
#include "io/tokenizer/tokenizer.h"
#include "model/config.h"
#include "tests/support/repo_paths.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using glm4::testing::kModel;
using glm4::testing::kSource;
using glm4::testing::run;
using glm4::testing::run_program;
using glm4::testing::run_program_with_input;
using glm4::testing::succeeds;
using glm4::testing::TempDir;
namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// What a model answers to a conversation that ends with a user turn: greedy, with the stop ids
// the CLI uses for chat (generation_config.json's eos ids and the template's).
struct Chatter {
  explicit Chatter(const std::string& dir) : dir(dir) {}
  std::string dir;
  std::unique_ptr<Glm4Model> model = load_model(dir);
  std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(dir);
  ChatFormat format = detect_chat_format(*tokenizer);
  std::vector<int32_t> ids;  // of the last answer
  bool stopped = false;      // the last answer ended with a stop id

  std::string answer(const std::vector<ChatMessage>& messages, int max_tokens) {
    GenerationConfig cfg;
    cfg.max_tokens = max_tokens;
    cfg.stop_ids = load_eos_ids(dir);
    for (int32_t id : stop_ids(*tokenizer, format)) cfg.stop_ids.push_back(id);
    NoGradGuard no_grad;
    Generator gen(*model, cfg);
    gen.start(render_chat(*tokenizer, format, messages, true).ids);
    ids.clear();
    while (auto id = gen.next()) ids.push_back(*id);
    stopped = gen.stop_token().has_value();
    return tokenizer->decode(ids, true);
  }
};

// Two turns through `glm4 chat` on stdin: the second reply continues the KV cache of the first
// and must equal a fresh generation over the whole conversation.
TEST(ChatCommand, TwoTurnsEqualFreshGenerations) {
  const std::string q1 = "What is 17 plus 25?", q2 = "Name a book of the Bible.";
  auto r = run_program_with_input(
      GLM4_BINARY, {"chat", "--model", kModel, "--max-tokens", "24", "--compute", "f32"},
      q1 + "\n" + q2 + "\n\n", /*stdout_only=*/true);
  ASSERT_TRUE(succeeds(r));
  Chatter c(kModel);
  std::string a1 = c.answer({{"user", q1}}, 24);
  std::string a2 = c.answer({{"user", q1}, {"assistant", a1}, {"user", q2}}, 24);
  EXPECT_EQ(r.output, a1 + "\n" + a2 + "\n");
  EXPECT_FALSE(a1.empty());
  EXPECT_NE(a1, a2);

  auto bad = run({"chat", "--model", kModel + "/nope"});
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.output.find("--model"), std::string::npos) << bad.output;
}

// Numbers in one attribute of the first element named `tag` after `from`.
std::vector<double> numbers_in(const std::string& svg, const std::string& tag,
                               const std::string& attr) {
  size_t at = svg.find("<" + tag);
  EXPECT_NE(at, std::string::npos) << tag;
  size_t begin = svg.find(attr + "=\"", at) + attr.size() + 2, end = svg.find('"', begin);
  std::vector<double> out;
  std::string text = svg.substr(begin, end - begin);
  std::regex number(R"(-?[0-9]+(\.[0-9]+)?)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), number);
       it != std::sregex_iterator(); ++it)
    out.push_back(std::stod(it->str()));
  return out;
}

TEST(PlotCommand, DrawsTrainAndValidationLoss) {
  TempDir tmp;
  std::ofstream(tmp / "metrics.jsonl") << R"({"step": 0, "val_loss": 5.0})"
                                       << "\n"
                                       << R"({"step": 1, "loss": 4.0, "lr": 0.1})"
                                       << "\n"
                                       << R"({"step": 2, "loss": 3.0})"
                                       << "\n\n"
                                       << R"({"step": 3, "loss": 2.0})"
                                       << "\n"
                                       << R"({"step": 4, "loss": 1.0})"
                                       << "\n"
                                       << R"({"step": 4, "val_loss": 1.5})"
                                       << "\n";
  auto r = run({"plot", (tmp / "metrics.jsonl").string(), "--out", (tmp / "loss.svg").string()});
  ASSERT_TRUE(succeeds(r));
  EXPECT_NE(r.output.find("4 train points, 2 validation points"), std::string::npos) << r.output;
  std::string svg = read_file(tmp / "loss.svg");
  ASSERT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  std::vector<double> points =
      numbers_in(svg, "polyline", "points");  // x,y pairs of the train line
  ASSERT_EQ(points.size(), 8u);
  for (size_t i = 2; i < points.size(); i += 2) {
    EXPECT_GT(points[i], points[i - 2]);      // later steps to the right
    EXPECT_GT(points[i + 1], points[i - 1]);  // lower loss further down
  }
  size_t circles = 0;
  for (size_t at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1))
    ++circles;
  EXPECT_EQ(circles, 2u);  // one dot per validation point

  std::ofstream(tmp / "bad.jsonl") << R"({"step": 1, "loss": 2.0})"
                                   << "\n{oops\n";
  auto bad = run({"plot", (tmp / "bad.jsonl").string(), "--out", (tmp / "bad.svg").string()});
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.output.find("bad.jsonl:2: invalid JSON"), std::string::npos) << bad.output;
  EXPECT_FALSE(fs::exists(tmp / "bad.svg"));
  auto missing = run({"plot", (tmp / "none.jsonl").string(), "--out", (tmp / "x.svg").string()});
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.output.find("none.jsonl"), std::string::npos) << missing.output;
}

std::string id_list(const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) out.append(out.empty() ? "" : ",").append(std::to_string(id));
  return out;
}

// A model directory whose chat template is the GLM-4.5 family's (the embedded model's files plus
// GLM-4.6's chat_template.jinja) is chatted in that format by tokenize and generate, and
// generate's --no-thinking is the template's enable_thinking=false.
TEST(ChatFormatChoice, TemplateInTheModelDirectoryAndNoThinking) {
  TempDir dir;
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors",
                        "tokenizer.model", "tokenizer_config.json"})
    fs::create_symlink(fs::path(kModel) / f, dir / f);
  fs::copy_file(fs::path(GLM4_TEST_DATA) / "chat_templates" / "GLM-4.6.jinja",
                dir / "chat_template.jinja");
  std::unique_ptr<Tokenizer> tok = load_tokenizer(dir.path());
  ASSERT_EQ(detect_chat_format(*tok, dir.path()), ChatFormat::Glm45);
  const std::vector<ChatMessage> ask = {{"user", "Hello"}};
  ChatOptions no_thinking;
  no_thinking.enable_thinking = false;
  const auto thinking_ids = render_chat(*tok, ChatFormat::Glm45, ask, true).ids;
  const auto plain_ids = render_chat(*tok, ChatFormat::Glm45, ask, true, no_thinking).ids;
  ASSERT_NE(thinking_ids, plain_ids);

  auto t = run_program(
      GLM4_BINARY, {"tokenize", "--model", dir.path().string(), "--chat", "--text", "Hello"}, true);
  ASSERT_TRUE(succeeds(t));
  EXPECT_EQ(t.output, id_list(thinking_ids) + "\n");
  for (bool off : {false, true}) {
    std::vector<std::string> args = {
        "generate", "--model", dir.path().string(), "--chat", "--prompt", "Hello", "--max-tokens",
        "1",        "--json",  "--compute",         "f32"};
    if (off) args.push_back("--no-thinking");
    auto g = run_program(GLM4_BINARY, args, true);
    ASSERT_TRUE(succeeds(g));
    EXPECT_EQ(nlohmann::json::parse(g.output).at("prompt_ids").get<std::vector<int32_t>>(),
              off ? plain_ids : thinking_ids);
  }
}

TEST(TokenizerTrainCommand, TrainsATokenizerThatGlm4Uses) {
  TempDir tmp;
  {
    std::ofstream text(tmp / "corpus.txt");
    for (int i = 0; i < 300; ++i)
      text << "In the beginning line " << i << " the model read the words of the corpus again.\n"
           << "A tokenizer learns merges from frequent pairs; rare words fall back to pieces.\n";
  }
  auto r = run({"tokenizer", "train", "--input", (tmp / "corpus.txt").string(), "--vocab-size",
                "400", "--out", (tmp / "tok").string()});
  ASSERT_TRUE(succeeds(r));
  ASSERT_TRUE(fs::exists(tmp / "tok" / "tokenizer.model"));
  auto tok = load_tokenizer(tmp / "tok");
  EXPECT_EQ(tok->vocab_size(), 400);
  for (const char* special : {"[gMASK]", "<sop>", "<|user|>", "<|assistant|>", "<|endoftext|>"})
    EXPECT_TRUE(tok->special_id(special).has_value()) << special;
  const std::string sentence = "the model read the words";
  std::vector<int32_t> ids = tok->encode(sentence);
  EXPECT_LT(ids.size(), sentence.size() / 2);  // merged into pieces, not letters
  EXPECT_EQ(tok->decode(ids), sentence);

  // glm4 tokenize reads it as a model directory's tokenizer.
  auto t = run_program(GLM4_BINARY,
                       {"tokenize", "--model", (tmp / "tok").string(), "--text", sentence}, true);
  ASSERT_TRUE(succeeds(t));
  std::string printed;
  for (int32_t id : ids) printed.append(printed.empty() ? "" : ",").append(std::to_string(id));
  EXPECT_EQ(t.output, printed + "\n");

  auto bad = run({"tokenizer", "train", "--input", (tmp / "none.txt").string(), "--out",
                  (tmp / "t2").string()});
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.output.find("none.txt"), std::string::npos) << bad.output;
  auto small = run({"tokenizer", "train", "--input", (tmp / "corpus.txt").string(), "--vocab-size",
                    "5", "--out", (tmp / "t3").string()});
  EXPECT_EQ(small.status, 1);
  EXPECT_NE(small.output.find("--vocab-size"), std::string::npos) << small.output;
}

// evaluate against references whose answers are known: three are the model's own greedy answers
// (with stray whitespace, which scoring trims), two are not; and the answer loss per task. The
// embedded base model rarely ends an answer by itself, so a copy of it lists extra end tokens in
// generation_config.json (a token each answer draws early, for the first time), which evaluate
// honours like any stop id.
TEST(EvaluateCommand, ExactMatchCountsKnownAnswers) {
  TempDir tmp;
  const fs::path model = tmp / "model";
  fs::copy(kModel, model, fs::copy_options::recursive);
  const std::vector<std::string> questions = {"What is 17 plus 25?", "Name a book of the Bible.",
                                              "What is the capital of France?"};
  std::vector<int32_t> eos = load_eos_ids(model);
  {
    Chatter base(model.string());
    std::vector<std::vector<int32_t>> unstopped;
    for (const std::string& q : questions) {
      base.answer({{"user", q}}, 12);
      if (!base.stopped) unstopped.push_back(base.ids);
    }
    // The stop for an answer is its first token from the fourth on that it has not drawn before
    // and that begins no answer, so every answer keeps at least its first token.
    auto begins_an_answer = [&](int32_t id) {
      return std::any_of(unstopped.begin(), unstopped.end(),
                         [&](const auto& ids) { return ids.front() == id; });
    };
    for (const std::vector<int32_t>& ids : unstopped) {
      for (size_t i = 3; i < ids.size(); ++i) {
        if (std::find(ids.begin(), ids.begin() + i, ids[i]) == ids.begin() + i &&
            !begins_an_answer(ids[i])) {
          eos.push_back(ids[i]);
          break;
        }
      }
    }
  }
  nlohmann::json gen = nlohmann::json::parse(read_file(model / "generation_config.json"));
  gen["eos_token_id"] = eos;
  std::ofstream(model / "generation_config.json") << gen.dump();
  Chatter c(model.string());
  {
    std::ofstream data(tmp / "eval.jsonl");
    for (const std::string& q : questions) {
      std::string a = c.answer({{"user", q}}, 64);
      ASSERT_TRUE(c.stopped && !a.empty()) << q;
      nlohmann::json r = {{"task", "own"},
                          {"messages",
                           {{{"role", "user"}, {"content", q}},
                            {{"role", "assistant"}, {"content", "  " + a + "\n"}}}}};
      data << r.dump() << "\n";
    }
    for (const char* q : {"What is 2 plus 2?", "Say yes."}) {
      nlohmann::json r = {{"task", "other"},
                          {"messages",
                           {{{"role", "user"}, {"content", q}},
                            {{"role", "assistant"}, {"content", "zzz qqq xxx"}}}}};
      data << r.dump() << "\n";
    }
  }
  for (const char* batch : {"1", "4"}) {
    auto r = run_program(GLM4_BINARY,
                         {"evaluate", "--model", model.string(), "--data",
                          (tmp / "eval.jsonl").string(), "--batch-size", batch, "--compute", "f32"},
                         true);
    ASSERT_TRUE(succeeds(r));
    nlohmann::json j = nlohmann::json::parse(r.output);
    EXPECT_EQ(j["examples"], 5);
    EXPECT_EQ(j["compute"], "f32");  // what ran, as in the train log and generate --json
    EXPECT_EQ(j["kernel"], "fp32");
    EXPECT_DOUBLE_EQ(double(j["exact_match"]), 0.6) << "batch " << batch;
    EXPECT_DOUBLE_EQ(double(j["exact_match_by_task"]["own"]), 1.0);
    EXPECT_DOUBLE_EQ(double(j["exact_match_by_task"]["other"]), 0.0);
    // The answer loss per task lies on both sides of the overall one (a token-weighted mean).
    double own = j["answer_loss_by_task"]["own"], other = j["answer_loss_by_task"]["other"];
    EXPECT_LT(std::min(own, other), double(j["answer_loss"]));
    EXPECT_GT(std::max(own, other), double(j["answer_loss"]));
  }
  {  // one task: its answer loss is the overall one
    std::ifstream all(tmp / "eval.jsonl");
    std::ofstream own(tmp / "own.jsonl");
    for (std::string line; std::getline(all, line);)
      if (line.find("\"own\"") != std::string::npos) own << line << "\n";
  }
  auto own = run_program(GLM4_BINARY,
                         {"evaluate", "--model", model.string(), "--data",
                          (tmp / "own.jsonl").string(), "--compute", "f32"},
                         true);
  ASSERT_TRUE(succeeds(own));
  nlohmann::json o = nlohmann::json::parse(own.output);
  EXPECT_EQ(o["examples"], 3);
  EXPECT_DOUBLE_EQ(double(o["answer_loss_by_task"]["own"]), double(o["answer_loss"]));
  auto zero = run({"evaluate", "--model", kModel, "--data", (tmp / "eval.jsonl").string(),
                   "--batch-size", "0"});
  EXPECT_EQ(zero.status, 1);
  EXPECT_NE(zero.output.find("--batch-size"), std::string::npos) << zero.output;
}

}  // namespace
}  // namespace glm4
