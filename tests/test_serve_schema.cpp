// The OpenAI request schema without a server: each bad field is a 400 naming it; defaults and
// aliases; tokenization and the context check; and mutated bodies never raise anything but an
// ApiError (the server turns those into 4xx answers and keeps running).
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "base/check.h"
#include "serve/openai_schema.h"
#include "serve/sampling_defaults.h"
#include "tests/support/repo_paths.h"
#include "tests/support/temp_dir.h"

namespace glm4::serve {
namespace {

using glm4::testing::kModel;

struct Served {
  Served() : model(load_model(kModel)), tokenizer(load_tokenizer(kModel)) {
    s.model = model.get();
    s.tokenizer = tokenizer.get();
    s.format = detect_chat_format(*tokenizer);
    s.base_name = "base";
    s.adapter_names = {"ad"};
    s.eos_ids = {3};
    s.chat_stop_ids = stop_ids(*tokenizer, s.format);
  }
  std::unique_ptr<Glm4Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  ServedModels s;
};

const Served& served() {
  static Served* s = new Served();
  return *s;
}

ApiError error_of(const std::string& body, Endpoint e = Endpoint::Chat) {
  try {
    build_slot_request(parse_request(body, e), served().s, 1);
  } catch (const ApiError& err) {
    return err;
  }
  return ApiError(200, "no error");
}

TEST(OpenAiSchema, EachBadFieldIsNamed) {
  const std::string m = R"("messages": [{"role": "user", "content": "hi"}])";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{" + m + R"(, "temperature": "hot"})", "temperature"},
      {"{" + m + R"(, "temperature": -0.1})", "temperature"},
      {"{" + m + R"(, "top_p": 1.5})", "top_p"},
      {"{" + m + R"(, "top_k": 2.5})", "top_k"},
      {"{" + m + R"(, "min_p": true})", "min_p"},
      {"{" + m + R"(, "repetition_penalty": 0})", "repetition_penalty"},
      {"{" + m + R"(, "max_tokens": -3})", "max_tokens"},
      {"{" + m + R"(, "max_completion_tokens": "many"})", "max_completion_tokens"},
      {"{" + m + R"(, "seed": 1.5})", "seed"},
      {"{" + m + R"(, "stop": {"a": 1}})", "stop"},
      {"{" + m + R"(, "stream": "yes"})", "stream"},
      {"{" + m + R"(, "stream_options": {"include_usage": 1}})", "stream_options.include_usage"},
      {"{" + m + R"(, "n": 0})", "n"},
      {"{" + m + R"(, "n": 17})", "n"},
      {"{" + m + R"(, "chat_template_kwargs": [1]})", "chat_template_kwargs"},
      {"{" + m + R"(, "chat_template_kwargs": {"enable_thinking": "no"}})",
       "chat_template_kwargs.enable_thinking"},
      {R"({"messages": [{"role": "assistant", "content": "a", "reasoning_content": 3}]})",
       "messages[0].reasoning_content"},
      {"{" + m + R"(, "logprobs": 1})", "logprobs"},
      {"{" + m + R"(, "logprobs": true, "top_logprobs": 21})", "top_logprobs"},
      {"{" + m + R"(, "model": 7})", "model"},
      {R"({"messages": "hi"})", "messages"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0]"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
  };
  for (const auto& [body, param] : cases) {
    ApiError e = error_of(body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, param) << body << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(param), std::string::npos) << e.what();
    EXPECT_EQ(error_body(e)["error"]["param"], param);
  }
  EXPECT_EQ(error_of(R"({"prompt": "x", "logprobs": 30})", Endpoint::Completion).param, "logprobs");
  EXPECT_EQ(error_of(R"({"prompt": "x", "echo": true})", Endpoint::Completion).param, "echo");
  EXPECT_EQ(error_of(R"({"prompt": ["a", "b"]})", Endpoint::Completion).param, "prompt");
  EXPECT_EQ(error_of(R"({"prompt": [1, 4000]})", Endpoint::Completion).param, "prompt");
  EXPECT_EQ(error_of("{" + m + R"(, "model": "nope"})").status, 404);
  EXPECT_EQ(error_of("not json").code, "invalid_json");
  EXPECT_EQ(error_of("[]").code, "invalid_json");
  EXPECT_EQ(error_of("").status, 400);
  ApiError long_prompt =
      error_of(R"({"prompt": ")" + std::string(5000, 'x') + " " + std::string(5000, 'y') + R"("})",
               Endpoint::Completion);
  EXPECT_EQ(long_prompt.code, "context_length_exceeded");
}

TEST(OpenAiSchema, ValidRequestsBecomeSlotRequests) {
  ParsedRequest p = parse_request(
      R"({"model": "ad", "messages": [{"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
          {"role": "user", "content": "hi"}], "max_completion_tokens": 7, "temperature": 0.5, "top_k": -1,
          "stop": "END", "stream": true, "stream_options": {"include_usage": true}, "logprobs": true,
          "unknown_field": {"ignored": [1, 2]}, "presence_penalty": null})",
      Endpoint::Chat);
  SlotRequest r = build_slot_request(p, served().s, 99);
  EXPECT_EQ(r.adapter, 0);
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_EQ(r.sampling.seed, 99u);  // no seed given: the server's
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.top_logprobs, 0);
  EXPECT_TRUE(p.stream && p.include_usage);
  EXPECT_EQ(r.stop_ids, served().s.chat_stop_ids);
  const Tokenizer& tok = *served().tokenizer;
  EXPECT_EQ(
      r.prompt,
      render_chat(tok, served().s.format, {{"system", "Be brief."}, {"user", "hi"}}, true).ids);

  SlotRequest c = build_slot_request(
      parse_request(R"({"prompt": [[5, 6, 7]], "seed": -1})", Endpoint::Completion), served().s, 1);
  EXPECT_EQ(c.prompt, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(c.adapter, -1);
  EXPECT_EQ(c.max_tokens, 1024 - 3);  // no max_tokens: the rest of the context
  EXPECT_EQ(c.sampling.seed, ~uint64_t(0));
  EXPECT_EQ(c.stop_ids, served().s.eos_ids);
}

// A request that leaves out temperature, top_p or top_k samples with the server's defaults:
// OpenAI's (temperature 1, top_p 1) unless generation_config.json sets them; fields given win.
TEST(OpenAiSchema, SamplingFieldsLeftOutComeFromTheServersDefaults) {
  const std::string chat = R"({"messages": [{"role": "user", "content": "hi"}]})";
  SlotRequest openai = build_slot_request(parse_request(chat, Endpoint::Chat), served().s, 1);
  EXPECT_FLOAT_EQ(openai.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(openai.sampling.top_p, 1.0f);
  EXPECT_EQ(openai.sampling.top_k, 0);
  EXPECT_EQ(parse_request(chat, Endpoint::Chat).n, 1);
  const ParsedRequest streamed =  // n answers streamed together (serve/choice_streams.h)
      parse_request(R"({"prompt": "x", "n": 2, "stream": true})", Endpoint::Completion);
  EXPECT_EQ(streamed.n, 2);
  EXPECT_TRUE(streamed.stream);

  ServedModels tuned = served().s;
  tuned.sampling_defaults.temperature = 0.6f;
  tuned.sampling_defaults.top_p = 0.8f;
  tuned.sampling_defaults.top_k = 20;
  SlotRequest d = build_slot_request(
      parse_request(R"({"prompt": "x", "n": 3})", Endpoint::Completion), tuned, 1);
  EXPECT_FLOAT_EQ(d.sampling.temperature, 0.6f);
  EXPECT_FLOAT_EQ(d.sampling.top_p, 0.8f);
  EXPECT_EQ(d.sampling.top_k, 20);
  SlotRequest given = build_slot_request(
      parse_request(R"({"prompt": "x", "temperature": 0, "top_k": 5})", Endpoint::Completion),
      tuned, 1);
  EXPECT_FLOAT_EQ(given.sampling.temperature, 0.0f);
  EXPECT_EQ(given.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(given.sampling.top_p, 0.8f);
}

TEST(OpenAiSchema, SamplingDefaultsAreReadFromGenerationConfig) {
  // The embedded model's generation_config.json sets no sampling field: OpenAI's defaults.
  SamplingDefaults tiny = load_sampling_defaults(kModel);
  EXPECT_FLOAT_EQ(tiny.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(tiny.sampling.top_p, 1.0f);
  EXPECT_EQ(tiny.source, "OpenAI defaults");

  glm4::testing::TempDir dir;
  EXPECT_EQ(load_sampling_defaults(dir.path()).source, "OpenAI defaults");  // no file at all
  std::ofstream(dir / "generation_config.json")
      << R"({"do_sample": true, "temperature": 0.6, "top_p": 0.8, "top_k": 20, "eos_token_id": 3})";
  SamplingDefaults glm = load_sampling_defaults(dir.path());
  EXPECT_FLOAT_EQ(glm.sampling.temperature, 0.6f);
  EXPECT_FLOAT_EQ(glm.sampling.top_p, 0.8f);
  EXPECT_EQ(glm.sampling.top_k, 20);
  EXPECT_EQ(glm.source, "generation_config.json");

  std::ofstream(dir / "generation_config.json") << R"({"top_p": "high"})";
  try {
    load_sampling_defaults(dir.path());
    ADD_FAILURE() << "a string top_p was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("generation_config.json: \"top_p\" must be a number"), std::string::npos)
        << what;
  }
}

// The GLM-4.5 family's switches reach the renderer: enable_thinking from chat_template_kwargs,
// an earlier answer's reasoning_content.
TEST(OpenAiSchema, ThinkingSwitchAndReasoningReachTheTemplate) {
  ParsedRequest p = parse_request(
      R"({"messages": [{"role": "user", "content": "q"},
          {"role": "assistant", "content": "a", "reasoning_content": "r"},
          {"role": "user", "content": "q2"}],
          "chat_template_kwargs": {"enable_thinking": false, "other": 1}})",
      Endpoint::Chat);
  EXPECT_FALSE(p.chat_options.enable_thinking);
  EXPECT_EQ(p.messages[1].reasoning_content, "r");
  EXPECT_TRUE(parse_request(R"({"messages": [{"role": "user", "content": "q"}]})", Endpoint::Chat)
                  .chat_options.enable_thinking);
  ServedModels glm45 = served().s;
  glm45.format = ChatFormat::Glm45;
  const SlotRequest r = build_slot_request(p, glm45, 1);
  EXPECT_EQ(
      r.prompt,
      render_chat(*served().tokenizer, ChatFormat::Glm45, p.messages, true, p.chat_options).ids);
  ChatOptions thinking;
  EXPECT_NE(r.prompt,
            render_chat(*served().tokenizer, ChatFormat::Glm45, p.messages, true, thinking).ids);
}

TEST(OpenAiSchema, DeeplyNestedBodiesAreRefusedBeforeParsing) {
  const std::string deep = std::string(300000, '[') + std::string(300000, ']');
  for (const std::string& body : {R"({"prompt": )" + deep + "}",
                                  R"({"messages": [{"role": "user", "content": )" + deep + "}]}",
                                  R"({"unknown": )" + deep + "}", std::string(300000, '{')}) {
    ApiError e = error_of(body, Endpoint::Completion);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.code, "invalid_json") << e.what();
  }
  // Brackets inside strings are text, and moderate nesting of unknown fields is fine.
  EXPECT_EQ(
      error_of(
          R"({"prompt": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", "x": [[[[1]]]]})",
          Endpoint::Completion)
          .status,
      200);
}

// More than kMaxMessages (4096) messages is a 400 naming "messages"; 4096 parse.
TEST(OpenAiSchema, MessageCountIsLimited) {
  auto body = [](int n) {
    std::string b = R"({"messages": [)";
    for (int i = 0; i < n; ++i)
      b += std::string(i ? "," : "") + R"({"role": "user", "content": "a"})";
    return b + "]}";
  };
  EXPECT_EQ(parse_request(body(4096), Endpoint::Chat).messages.size(), 4096u);
  try {
    parse_request(body(4097), Endpoint::Chat);
    ADD_FAILURE() << "4097 messages were accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "messages");
    EXPECT_NE(std::string(e.what()).find("has 4097 messages; the limit is 4096"), std::string::npos)
        << e.what();
  }
}

TEST(OpenAiSchema, MutatedBodiesOnlyEverRaiseApiErrors) {
  const std::vector<std::string> seeds = {
      R"({"model": "base", "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 5,
          "temperature": 0.7, "top_p": 0.9, "stop": ["a", "b"], "logprobs": true, "top_logprobs": 2})",
      R"({"model": "ad", "prompt": "Once upon", "max_tokens": 3, "seed": 4, "logprobs": 1, "stream": false})",
  };
  std::mt19937 rng(7);
  const std::string alphabet = "{}[]\",:0123456789.-eE truefalsnul\\u\xff\xc3";
  int accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string body = seeds[size_t(i) % seeds.size()];
    const int edits = 1 + int(rng() % 4);
    for (int k = 0; k < edits && !body.empty(); ++k) {
      const size_t at = rng() % body.size();
      switch (rng() % 3) {
        case 0:
          body.erase(at, 1 + rng() % 3);
          break;
        case 1:
          body.insert(at, 1, alphabet[rng() % alphabet.size()]);
          break;
        default:
          body[at] = alphabet[rng() % alphabet.size()];
      }
    }
    const Endpoint e = i % 2 ? Endpoint::Completion : Endpoint::Chat;
    try {
      build_slot_request(parse_request(body, e), served().s, 1);
      ++accepted;
    } catch (const ApiError& err) {
      EXPECT_GE(err.status, 400) << body;
      EXPECT_LT(err.status, 500) << body;
      dump(error_body(err));  // the message must serialise even when it quotes bad bytes
    } catch (const std::exception& other) {
      ADD_FAILURE() << "body " << body << " raised " << other.what();
    }
  }
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace glm4::serve
