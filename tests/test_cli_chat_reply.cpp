// A chat reply as the user sees it on the embedded model: GLM's template ends the prompt with
// <|assistant|> and the model writes "\n" first; generate --chat and the server's chat answers
// (whole and streamed) leave that "\n" out, while the training targets keep it.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/tokenizer/chat_template.h"
#include "io/tokenizer/tokenizer.h"
#include "tests/support/repo_paths.h"
#include "tests/support/run_command.h"
#include "tests/support/server_process.h"

namespace glm4 {
namespace {

using glm4::testing::kModel;
using glm4::testing::Result;
using glm4::testing::ServerProcess;
using json = nlohmann::json;

// A question whose greedy answer on the embedded model starts with the template's "\n" (checked
// below).
const std::string kQuestion = "Count the words: a b c";

std::unique_ptr<Tokenizer> tokenizer() { return load_tokenizer(kModel); }

TEST(ChatReply, GenerateChatLeavesOutTheNewlineTheModelWritesFirst) {
  Result r = glm4::testing::run_program(GLM4_BINARY,
                                        {"generate", "--model", kModel, "--chat", "--prompt",
                                         kQuestion, "--max-tokens", "12", "--json"},
                                        true);
  ASSERT_EQ(r.status, 0) << r.output;
  const json j = json::parse(r.output);
  const std::vector<int32_t> ids = j["ids"].get<std::vector<int32_t>>();
  const std::string drawn = tokenizer()->decode(ids, true);
  // The model does write the template's "\n" (else this test shows nothing) ...
  ASSERT_FALSE(drawn.empty());
  ASSERT_EQ(drawn[0], '\n') << drawn;
  // ... and the answer is the rest.
  const std::string text = j["text"].get<std::string>();
  EXPECT_EQ(text, drawn.substr(1));

  // Streamed to the terminal: the same text, then one "\n" (stats go to stderr).
  Result streamed = glm4::testing::run_program(
      GLM4_BINARY,
      {"generate", "--model", kModel, "--chat", "--prompt", kQuestion, "--max-tokens", "12"}, true);
  ASSERT_EQ(streamed.status, 0) << streamed.output;
  EXPECT_EQ(streamed.output, text + "\n");
}

TEST(ChatReply, TrainingTargetsStillHoldTheNewlineAfterTheAssistantToken) {
  auto tok = tokenizer();
  const ChatFormat format = detect_chat_format(*tok);
  ASSERT_TRUE(reply_starts_with_newline(format));
  RenderedChat chat =
      render_chat(*tok, format, {{"user", kQuestion}, {"assistant", "Paris"}}, false);
  const int32_t assistant = *tok->special_id("<|assistant|>");
  auto at = std::find(chat.ids.begin(), chat.ids.end(), assistant);
  ASSERT_NE(at, chat.ids.end());
  const size_t first = size_t(at - chat.ids.begin()) + 1;
  ASSERT_LT(first, chat.ids.size());
  const std::vector<int32_t> reply(chat.ids.begin() + long(first), chat.ids.end());
  const std::string decoded = tok->decode(reply, true);
  ASSERT_FALSE(decoded.empty());
  EXPECT_EQ(decoded[0], '\n') << decoded;
  EXPECT_NE(decoded.find("Paris"), std::string::npos) << decoded;
  for (size_t t = first; t < chat.ids.size(); ++t) EXPECT_EQ(chat.target[t], 1) << t;
}

// The server: message.content of a whole answer and the first streamed delta with text.
TEST(ChatReply, ServerChatAnswersLeaveOutTheNewline) {
  ServerProcess server({"--model", kModel, "--compute", "f32"});
  ASSERT_TRUE(server.listening()) << server.log();
  httplib::Client http("127.0.0.1", server.port());
  http.set_read_timeout(120, 0);
  json body = {{"messages", {{{"role", "user"}, {"content", kQuestion}}}},
               {"max_tokens", 12},
               {"temperature", 0},
               {"logprobs", true}};
  auto res = http.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  ASSERT_EQ(res->status, 200) << res->body;
  const json answer = json::parse(res->body)["choices"][0];
  // The first token drawn is the "\n" (its log-probability is reported) ...
  ASSERT_FALSE(answer["logprobs"]["content"].empty()) << answer.dump();
  EXPECT_EQ(answer["logprobs"]["content"][0]["token"], "\n") << answer.dump();
  // ... and the content does not start with it.
  const std::string content = answer["message"]["content"].get<std::string>();
  ASSERT_FALSE(content.empty());
  EXPECT_NE(content[0], '\n') << content;

  body.erase("logprobs");
  body["stream"] = true;
  std::string received;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    received.append(data, n);
    return true;
  };
  httplib::Result sres = http.send(req);
  ASSERT_TRUE(sres) << httplib::to_string(sres.error());
  ASSERT_EQ(sres->status, 200);
  std::string first_delta, all;
  std::istringstream events(received);
  for (std::string line; std::getline(events, line);) {
    if (line.rfind("data: {", 0) != 0) continue;
    const json chunk = json::parse(line.substr(6));
    const std::string piece = chunk["choices"][0]["delta"].value("content", "");
    if (first_delta.empty()) first_delta = piece;
    all += piece;
  }
  ASSERT_FALSE(first_delta.empty()) << received;
  EXPECT_NE(first_delta[0], '\n') << received;
  EXPECT_EQ(all, content);
  EXPECT_EQ(server.stop(SIGTERM), 0) << server.log();
}

}  // namespace
}  // namespace glm4
