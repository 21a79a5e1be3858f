// response_format in the server: a bad format or schema is a 400 naming the field and the schema
// path; constrained slots batched with unconstrained ones give what a constrained Generator gives
// alone, and their text is JSON that follows the schema; and the same through HTTP with the
// official OpenAI client (tests/serve/response_format.mjs).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "infer/generator.h"
#include "serve/openai_schema.h"
#include "serve/scheduler.h"
#include "tests/support/repo_paths.h"
#include "tests/support/run_command.h"
#include "tests/support/server_process.h"

namespace glm4::serve {
namespace {

using glm4::testing::kModel;
using namespace std::chrono_literals;

const std::string kMessages = R"("messages": [{"role": "user", "content": "A person, as JSON."}])";
const std::string kSchema = R"({"type": "object", "properties": {
  "name": {"type": "string", "maxLength": 10}, "age": {"type": "integer"},
  "pet": {"enum": ["cat", "dog"]}}, "required": ["age", "name", "pet"]})";

struct Served {
  Served() : model(load_model(kModel)), tokenizer(load_tokenizer(kModel)) {
    s.model = model.get();
    s.tokenizer = tokenizer.get();
    s.format = detect_chat_format(*tokenizer);
    s.base_name = "base";
    s.eos_ids = {3};
    s.chat_stop_ids = stop_ids(*tokenizer, s.format);
    s.token_trie = std::make_shared<const grammar::TokenTrie>(*tokenizer);
  }
  std::unique_ptr<Glm4Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  ServedModels s;
};

Served& served() {
  static Served* s = new Served();
  return *s;
}

TEST(ResponseFormat, BadFormatsAndSchemasAreNamed) {
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {R"("response_format": "json")", "response_format", "expected an object"},
      {R"("response_format": {})", "response_format.type", "expected \"text\""},
      {R"("response_format": {"type": "xml"})", "response_format.type", "unknown type \"xml\""},
      {R"("response_format": {"type": "json_schema"})", "response_format.json_schema",
       "expected an object"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "p"}})",
       "response_format.json_schema.schema", "is required"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": 3, "schema": {}}})",
       "response_format.json_schema.name", "expected a string"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"schema": {}, "strict": 1}})",
       "response_format.json_schema.strict", "expected a boolean"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema":
         {"type": "object", "properties": {"age": {"type": "integer", "minimum": 0}}}}})",
       "response_format.json_schema.schema",
       "response_format.json_schema.schema.properties.age: \"minimum\" is not supported"},
  };
  for (const auto& [extra, param, message] : cases) {
    try {
      parse_request("{" + kMessages + ", " + extra + "}", Endpoint::Chat);
      ADD_FAILURE() << "no error for " << extra;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << extra;
      EXPECT_EQ(e.param, param) << extra;
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
  // The properties come in the order the request declares them.
  const ParsedRequest ordered = parse_request(
      "{" + kMessages + R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "o",
      "schema": {"type": "object", "properties": {"b": {"type": "null"}, "a": {"type": "null"}},
      "required": ["a", "b"]}}}})",
      Endpoint::Chat);
  grammar::Automaton a(ordered.grammar);
  EXPECT_TRUE(a.matches(R"({"b": null, "a": null})"));
  EXPECT_FALSE(a.matches(R"({"a": null, "b": null})"));
  EXPECT_EQ(
      parse_request("{" + kMessages + R"(, "response_format": {"type": "text"}})", Endpoint::Chat)
          .grammar,
      nullptr);
}

Served& with_trie(bool trie) {
  Served& s = served();
  if (!trie) s.s.token_trie = nullptr;
  return s;
}

TEST(ResponseFormat, ConstrainedSlotsBatchedEqualAGeneratorAloneAndFollowTheSchema) {
  Served& sv = served();
  const std::string body = "{" + kMessages +
                           R"(, "temperature": 1, "max_tokens": 300, "response_format":
      {"type": "json_schema", "json_schema": {"name": "person", "strict": true, "schema": )" +
                           kSchema + "}}}";
  const ParsedRequest parsed = parse_request(body, Endpoint::Chat);
  ASSERT_NE(parsed.grammar, nullptr);
  std::vector<SlotRequest> requests;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    requests.push_back(build_slot_request(parsed, sv.s, seed));
    ASSERT_NE(requests.back().token_trie, nullptr);
  }
  // An unconstrained request in the same batch.
  requests.push_back(build_slot_request(
      parse_request("{" + kMessages + R"(, "temperature": 1, "max_tokens": 40})", Endpoint::Chat),
      sv.s, 9));
  EXPECT_EQ(requests.back().grammar, nullptr);

  Scheduler scheduler(*sv.model, sv.tokenizer.get(), SchedulerConfig{});
  std::vector<std::shared_ptr<SlotHandle>> handles;
  for (const SlotRequest& r : requests) {
    Scheduler::Admission a;
    handles.push_back(scheduler.submit(r, &a));
    ASSERT_NE(handles.back(), nullptr);
  }
  int finished = 0;
  for (size_t i = 0; i < 3; ++i) {
    std::vector<int32_t> ids;
    std::string text, reason;
    for (SlotEvent e;;) {
      if (!handles[i]->next(&e, 100ms)) continue;
      ids.insert(ids.end(), e.ids.begin(), e.ids.end());
      text += e.text;
      if (e.done) {
        reason = e.finish_reason;
        break;
      }
    }
    // The same request through Generator alone.
    const SlotRequest& r = requests[i];
    GenerationConfig config;
    config.max_tokens = int(r.max_tokens);
    config.sampling = r.sampling;
    config.stop_ids = r.stop_ids;
    Generator gen(*sv.model, config);
    gen.set_constraint(
        std::make_shared<grammar::GrammarConstraint>(r.grammar, r.token_trie, r.stop_ids));
    gen.start(r.prompt);
    std::vector<int32_t> want;
    while (auto t = gen.next()) want.push_back(*t);
    EXPECT_EQ(ids, want) << "request " << i;
    if (reason != "stop") continue;
    ++finished;
    nlohmann::json v;
    ASSERT_NO_THROW(v = nlohmann::json::parse(text)) << text;
    EXPECT_TRUE(v.at("age").is_number_integer()) << text;
    EXPECT_TRUE(v.at("name").is_string()) << text;
    EXPECT_TRUE(v.at("pet") == "cat" || v.at("pet") == "dog") << text;
    EXPECT_EQ(v.size(), 3u) << text;
  }
  EXPECT_GE(finished, 2);
  for (SlotEvent e; !(handles[3]->next(&e, 100ms) && e.done);) {
  }
}

TEST(ResponseFormat, JsonObjectAndATrieBuiltPerRequest) {
  Served& sv = with_trie(false);
  const SlotRequest r = build_slot_request(
      parse_request("{" + kMessages + R"(, "response_format": {"type": "json_object"}})",
                    Endpoint::Chat),
      sv.s, 1);
  ASSERT_NE(r.grammar, nullptr);
  ASSERT_NE(r.token_trie, nullptr);
  EXPECT_EQ(r.token_trie->vocab_size(), sv.tokenizer->vocab_size());
  grammar::Automaton a(r.grammar);
  EXPECT_TRUE(a.matches(R"({"a": 1})"));
  EXPECT_FALSE(a.matches("[1]"));
}

TEST(ResponseFormat, OpenAIClientGetsSchemaValidJson) {
  ASSERT_TRUE(std::filesystem::exists(std::string(GLM4_SOURCE_DIR) +
                                      "/tests/node_modules/openai/package.json"))
      << "the OpenAI client is missing: run scripts/install_deps.sh (npm ci in tests/)";
  glm4::testing::ServerProcess server({"--model", kModel, "--max-batch", "4"});
  ASSERT_TRUE(server.listening()) << server.log();
  const glm4::testing::Result r = glm4::testing::run_program(
      "env", {"GLM4_URL=" + server.url(), "GLM4_BASE=glm4-tiny", "node",
              std::string(GLM4_SOURCE_DIR) + "/tests/serve/response_format.mjs"});
  ASSERT_EQ(r.status, 0) << r.output << "\nserver log:\n" << server.log();
  const nlohmann::json results =
      nlohmann::json::parse(r.output.substr(r.output.rfind('{')), nullptr, false);
  ASSERT_TRUE(results.is_object()) << r.output;
  EXPECT_GE(results.value("valid", 0), 3) << r.output;
  EXPECT_EQ(results.value("bad_schema", 0), 400) << r.output;
}

}  // namespace
}  // namespace glm4::serve
