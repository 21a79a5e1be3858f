// Token masks of constrained decoding against a brute-force check (a token is allowed exactly when
// its bytes keep the text a valid prefix, re-parsed from scratch), on a small hand-made vocabulary
// with partial UTF-8 tokens and on the embedded model's tokenizer; and the embedded model writing
// schema-valid JSON at temperature 1.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "autograd/node.h"
#include "base/check.h"
#include "infer/generator.h"
#include "infer/grammar/constraint.h"
#include "infer/grammar/json_schema.h"
#include "io/tokenizer/chat_template.h"
#include "tests/support/repo_paths.h"

namespace glm4::grammar {
namespace {

using json = nlohmann::json;

const json kSchema = json::parse(R"({"type": "object", "properties": {
  "name": {"type": "string", "maxLength": 8},
  "age": {"type": "integer"},
  "color": {"enum": ["red", "green", "blue"]},
  "ok": {"type": "boolean"}}, "required": ["age", "color", "name", "ok"]})");

// Brute force: the tokens whose bytes, after `prefix`, still lead somewhere (a fresh automaton
// parsing the whole text from the start); end ids only when `prefix` is complete.
std::vector<bool> brute_force(const Grammar& g, const TokenTrie& trie, const std::string& prefix,
                              const std::vector<int32_t>& end_ids) {
  std::vector<bool> out(size_t(trie.vocab_size()), false);
  for (int32_t id = 0; id < trie.vocab_size(); ++id) {
    Automaton fresh(std::make_shared<const Grammar>(g));
    if (std::find(end_ids.begin(), end_ids.end(), id) != end_ids.end())
      out[size_t(id)] = fresh.matches(prefix);
    else if (trie.is_text(id))
      out[size_t(id)] = fresh.step(fresh.start(), prefix + trie.bytes(id)) != Automaton::kDead;
  }
  return out;
}

void expect_masks_match(const JsonSchemaGrammar& g, const std::shared_ptr<const TokenTrie>& trie,
                        const std::string& text, const std::vector<int32_t>& end_ids,
                        size_t stride) {
  GrammarConstraint c(g.grammar, trie, end_ids);
  for (size_t n = 0; n <= text.size(); n += stride) {
    c.reset();
    ASSERT_TRUE(c.feed(text.substr(0, n))) << text.substr(0, n);
    const std::vector<bool> want = brute_force(*g.grammar, *trie, text.substr(0, n), end_ids);
    std::vector<float> logits(size_t(trie->vocab_size()) + 3, 0.0f);  // a padded model vocabulary
    c.mask(logits);
    for (int32_t id = 0; id < int32_t(logits.size()); ++id) {
      const bool allowed = id < trie->vocab_size() && want[size_t(id)];
      EXPECT_EQ(std::isfinite(logits[size_t(id)]), allowed)
          << "token " << id << " after '" << text.substr(0, n) << "'";
      EXPECT_EQ(c.allows(id), allowed) << "token " << id;
    }
  }
}

TEST(GrammarMask, SmallVocabularyEqualsBruteForce) {
  const std::vector<std::optional<std::string>> vocab = {
      std::nullopt, "{",   "}",       "\"",    "\"a",      "a",          "ab",        ":",
      " ",          "1",   "12",      "\xc3",  "\xa9",     "\xc3\xa9\"", "true",      "tr",
      "ue",         ",",   ",\"",     "null",  "\n",       "\n  ",       "\"}",       "e",
      "-",          "0",   "\\",      "\\u00", "\xe2\x82", "\xac",       "\"name\":", "age",
      "color",      "red", "\"red\"", "fal",   "se",       "ok",         std::nullopt};
  std::vector<std::optional<std::string>> all = vocab;  // and every byte a test text needs
  for (char c : std::string("{}[]:,\"\\ -.0123456789abcdefghijklmnopqrstuvwxyz"))
    all.push_back(std::string(1, c));
  auto trie = std::make_shared<const TokenTrie>(all);
  const std::vector<int32_t> end_ids = {0, 38};
  const JsonSchemaGrammar g = compile_json_schema(kSchema, "schema");
  const std::string text = R"({"age": -12, "color":"red", "name":"\u00e9)"
                           "\xc3\xa9\xe2\x82\xac"
                           R"(", "ok":false})";
  expect_masks_match(g, trie, text, end_ids, 1);
  expect_masks_match(json_object_grammar(), trie, R"({"a": [1, {"b": null}], "c": "x"})", end_ids,
                     1);
}

TEST(GrammarMask, EmbeddedTokenizerEqualsBruteForce) {
  auto tokenizer = load_tokenizer(testing::kModel);
  auto trie = std::make_shared<const TokenTrie>(*tokenizer);
  EXPECT_EQ(trie->vocab_size(), tokenizer->vocab_size());
  EXPECT_FALSE(trie->is_text(*tokenizer->special_id("<|user|>")));
  const std::vector<int32_t> end_ids = stop_ids(*tokenizer, ChatFormat::Glm4);
  const std::string text = R"({"age": 31, "color": "blue", "name": "Zo\u00eb)"
                           "\xc3\xa9"
                           R"(", "ok": true})";
  expect_masks_match(compile_json_schema(kSchema, "schema"), trie, text, end_ids, 5);
}

TEST(GrammarMask, AcceptRejectsWhatTheMaskForbids) {
  auto trie = std::make_shared<const TokenTrie>(
      std::vector<std::optional<std::string>>{"{", "}", "x", std::nullopt});
  GrammarConstraint c(json_object_grammar().grammar, trie, {3});
  EXPECT_FALSE(c.allows(3));
  EXPECT_THROW(c.accept(2), Error);
  c.accept(0);
  EXPECT_FALSE(c.complete());
  c.accept(1);
  EXPECT_TRUE(c.complete());
  std::vector<float> logits(4, 1.0f);
  c.mask(logits);  // only the end token is left
  EXPECT_EQ(logits, (std::vector<float>{-INFINITY, -INFINITY, -INFINITY, 1.0f}));
  GrammarConstraint dead(compile_json_schema(json::parse(R"({"const": "q"})"), "s").grammar, trie,
                         {3});
  EXPECT_THROW(dead.mask(logits), Error);  // no token can start "q"
}

// Checks a reply against kSchema by hand (types, enum, bounds, no other keys).
void expect_valid(const std::string& reply) {
  json v;
  ASSERT_NO_THROW(v = json::parse(reply)) << reply;
  ASSERT_TRUE(v.is_object()) << reply;
  EXPECT_EQ(v.size(), 4u) << reply;
  EXPECT_TRUE(v["age"].is_number_integer()) << reply;
  EXPECT_TRUE(v["name"].is_string() && v["name"].get<std::string>().size() <= 32) << reply;
  EXPECT_TRUE(v["ok"].is_boolean()) << reply;
  const std::string color = v["color"].is_string() ? v["color"].get<std::string>() : "";
  EXPECT_TRUE(color == "red" || color == "green" || color == "blue") << reply;
}

TEST(GrammarMask, EmbeddedModelWritesSchemaValidJsonAtTemperatureOne) {
  NoGradGuard no_grad;
  auto tokenizer = load_tokenizer(testing::kModel);
  auto model = load_model(testing::kModel);
  auto trie = std::make_shared<const TokenTrie>(*tokenizer);
  GenerationConfig config;
  config.max_tokens = 400;
  config.sampling.temperature = 1.0f;
  config.stop_ids = stop_ids(*tokenizer, ChatFormat::Glm4);
  const std::vector<int32_t> prompt =
      render_chat(*tokenizer, ChatFormat::Glm4,
                  {{"user", "Describe a person as JSON with name, age, color and ok."}}, true)
          .ids;
  int finished = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    config.sampling.seed = seed;
    Generator gen(*model, config);
    gen.set_constraint(std::make_shared<GrammarConstraint>(
        compile_json_schema(kSchema, "schema").grammar, trie, config.stop_ids));
    gen.start(prompt);
    std::vector<int32_t> ids;
    while (auto t = gen.next()) ids.push_back(*t);
    if (ids.size() >= size_t(config.max_tokens)) continue;  // out of tokens inside a string
    EXPECT_FALSE(gen.stop_token());  // the closed object ended the reply: no end token drawn
    ++finished;
    expect_valid(tokenizer->decode(ids, true));
  }
  EXPECT_GE(finished, 3);
}

TEST(GrammarMask, AFinishedValueEndsTheReplyWithoutStopIds) {
  NoGradGuard no_grad;
  auto tokenizer = load_tokenizer(testing::kModel);
  auto model = load_model(testing::kModel);
  GenerationConfig config;  // no stop ids: only the closed value can end the reply
  config.max_tokens = 50;
  config.sampling.temperature = 1.0f;
  Generator gen(*model, config);
  gen.set_constraint(std::make_shared<GrammarConstraint>(
      compile_json_schema(json::parse(R"({"enum": [[1, 2], "ok"]})"), "s").grammar,
      std::make_shared<const TokenTrie>(*tokenizer), std::vector<int32_t>{}));
  for (uint64_t seed : {1, 2, 3}) {
    gen.start(std::vector<int32_t>{5, 7});
    std::vector<int32_t> ids;
    while (auto t = gen.next()) ids.push_back(*t);
    EXPECT_LT(ids.size(), 50u);
    EXPECT_FALSE(gen.stop_token());
    const std::string text = tokenizer->decode(ids, true);
    const size_t start = text.find_first_not_of(" \n");
    ASSERT_NE(start, std::string::npos) << text;
    EXPECT_TRUE(text.substr(start) == "[1,2]" || text.substr(start) == "\"ok\"") << text;
    (void)seed;
  }
}

}  // namespace
}  // namespace glm4::grammar
