// `glm4 serve` end to end: the official OpenAI client (tests/serve/openai_client.mjs, pinned in
// tests/package.json) against the real binary on the embedded model with two adapters built
// here; a load test with the server's memory before and after; SIGTERM during a stream.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "tests/support/random_adapter.h"
#include "tests/support/repo_paths.h"
#include "tests/support/run_command.h"
#include "tests/support/server_process.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using glm4::testing::Result;
using glm4::testing::ServerProcess;
using glm4::testing::TempDir;
using json = nlohmann::json;
namespace fs = std::filesystem;

using glm4::testing::kModel;
const std::string kClient = std::string(GLM4_SOURCE_DIR) + "/tests/serve/openai_client.mjs";
const std::string kKey = "sk-test-0123456789";
// The fp32 products: a decode row sums exactly the same alone or batched with up to 15 others
// (bf16 kernels on AMX machines switch kernels with the row count), so "concurrent = one at a
// time" checks the scheduler, not rounding.
const std::string kCompute = "f32";

class Serve : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        fs::exists(std::string(GLM4_SOURCE_DIR) + "/tests/node_modules/openai/package.json"))
        << "the OpenAI client is missing: run scripts/install_deps.sh (npm ci in tests/)";
    LoraConfig l;
    l.rank = 8;
    l.alpha = 16;
    l.targets = {"all-linear"};
    glm4::testing::write_random_adapter(kModel, dir / "alpha", l, 31, 0.2f);
    l.rank = 4;
    l.targets = {"q_proj", "v_proj", "down_proj"};
    l.num_layers = 2;
    glm4::testing::write_random_adapter(kModel, dir / "beta", l, 32, 0.2f);
  }

  std::unique_ptr<ServerProcess> start_main() {
    auto s = std::make_unique<ServerProcess>(std::vector<std::string>{
        "--model", kModel, "--adapter", "alpha=" + (dir / "alpha").string(), "--adapter",
        "beta=" + (dir / "beta").string(), "--api-key", kKey, "--max-batch", "8", "--max-queue",
        "16", "--compute", kCompute});
    EXPECT_TRUE(s->listening()) << s->log();
    return s;
  }

  Result client(const std::string& phase, const ServerProcess& main, const std::string& busy_url) {
    return glm4::testing::run_program(
        "env", {"GLM4_URL=" + main.url(), "GLM4_KEY=" + kKey, "GLM4_BASE=glm4-tiny",
                "GLM4_ADAPTERS=alpha,beta", "GLM4_BUSY_URL=" + busy_url, "node", kClient, phase});
  }

  // The reply glm4 generate gives for the same chat prompt (greedy, 24 tokens).
  std::string generate_reply(const std::string& adapter_dir) {
    std::vector<std::string> args = {"generate",     "--model",  kModel,
                                     "--chat",       "--prompt", "What is the capital of France?",
                                     "--max-tokens", "24",       "--json",
                                     "--compute",    kCompute};
    if (!adapter_dir.empty()) args.insert(args.end(), {"--adapter", adapter_dir});
    Result r = glm4::testing::run_program(GLM4_BINARY, args, true);
    EXPECT_EQ(r.status, 0) << r.output;
    return json::parse(r.output, nullptr, false).value("text", std::string("?"));
  }

  TempDir dir;
};

std::vector<json> log_lines(const std::string& log) {
  std::vector<json> out;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line, nullptr, false);
    if (j.is_object()) out.push_back(j);
  }
  return out;
}

TEST_F(Serve, OpenAIClientChatStreamAdaptersErrorsConcurrencyAndDisconnect) {
  auto main = start_main();
  ServerProcess busy({"--model", kModel, "--max-batch", "1", "--max-queue", "0"});
  ASSERT_TRUE(main->listening() && busy.listening()) << busy.log();
  Result r = client("functional", *main, busy.url());
  ASSERT_EQ(r.status, 0) << r.output << "\nserver log:\n" << main->log();
  json results = json::parse(r.output.substr(r.output.rfind('{')), nullptr, false);
  ASSERT_TRUE(results.is_object()) << r.output;
  // The server answers as the command line does, with and without an adapter.
  EXPECT_EQ(results.value("chat", ""), generate_reply(""));
  EXPECT_EQ(results.value("adapter", ""), generate_reply((dir / "alpha").string()));
  EXPECT_EQ(results.value("concurrent", 0), 8);

  // One JSON line per request; the client that went away is logged as cancelled early.
  const std::vector<json> lines = log_lines(main->log());
  int completions = 0, cancelled = 0, refused = 0;
  for (const json& l : lines) {
    if (!l.contains("endpoint")) continue;
    EXPECT_TRUE(l.contains("time") && l.contains("status")) << l.dump();
    if (l["status"] == 200 && l["endpoint"] != "/v1/models") {
      ++completions;
      EXPECT_TRUE(l.contains("model") && l.contains("prompt_tokens") &&
                  l.contains("completion_tokens") && l.contains("tokens_per_s"))
          << l.dump();
      if (l["finish_reason"] == "cancelled") {
        ++cancelled;
        EXPECT_LT(l["completion_tokens"].get<int>(), 1000);
      }
    }
    if (l["status"].get<int>() >= 400) ++refused;
  }
  EXPECT_GE(completions, 20);
  EXPECT_EQ(cancelled, 1);
  EXPECT_GE(refused, 15);
  EXPECT_EQ(main->stop(SIGINT), 0) << main->log();
}

TEST_F(Serve, LoadTestAnswersAllSixtyFourRequestsAndMemoryReturnsNearIdle) {
  auto main = start_main();
  ASSERT_TRUE(main->listening());
  Result warm = client("load", *main, "");  // threads and their heaps reach their working size
  ASSERT_EQ(warm.status, 0) << warm.output;
  const auto settle = std::chrono::milliseconds(1500);  // the scheduler trims memory after 1 s idle
  std::this_thread::sleep_for(settle);
  const int64_t idle_kb = main->rss_kb();
  Result r = client("load", *main, "");
  ASSERT_EQ(r.status, 0) << r.output << "\nserver log:\n" << main->log();
  EXPECT_EQ(json::parse(r.output.substr(r.output.rfind('{'))).value("answered", 0), 64);
  std::this_thread::sleep_for(settle);
  const int64_t after_kb = main->rss_kb();
  std::printf("server RSS: idle %lld kB, after 64 more requests %lld kB\n", (long long)idle_kb,
              (long long)after_kb);
  EXPECT_LE(after_kb, idle_kb + idle_kb / 10 + 8 * 1024);
  int answered = 0;
  for (const json& l : log_lines(main->log()))
    if (l.value("status", 0) == 200) ++answered;
  EXPECT_EQ(answered, 128);
  EXPECT_EQ(main->stop(SIGTERM), 0);
}

TEST_F(Serve, SigtermLetsTheStreamInFlightFinishThenExitsZero) {
  ServerProcess server({"--model", kModel});
  ASSERT_TRUE(server.listening()) << server.log();
  httplib::Client http("127.0.0.1", server.port());
  http.set_read_timeout(60, 0);
  std::string received;
  bool signalled = false;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body =
      R"({"prompt": "Once upon a time", "max_tokens": 300, "stream": true, "temperature": 0})";
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    received.append(data, n);
    if (!signalled && received.find("data: ") != std::string::npos) {
      signalled = true;
      ::kill(server.pid(), SIGTERM);  // mid-stream
    }
    return true;
  };
  httplib::Result res = http.send(req);
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_TRUE(signalled);
  EXPECT_NE(received.find("\"finish_reason\":\"length\""), std::string::npos)
      << received.substr(0, 400);
  EXPECT_NE(received.find("\"completion_tokens\":300"), std::string::npos);
  EXPECT_EQ(received.substr(received.size() - 14), "data: [DONE]\n\n");
  EXPECT_EQ(server.stop(SIGTERM), 0) << server.log();  // already on its way out: exit status 0
  const std::string log = server.log();
  EXPECT_NE(log.find("\"event\":\"shutdown\""), std::string::npos) << log;
  EXPECT_NE(log.find("\"event\":\"stopped\""), std::string::npos) << log;
}

// A client that sends a non-streamed request and closes the connection: the server frees the
// slot at once instead of generating 1,000 tokens for nobody, and logs the request as cancelled.
TEST_F(Serve, NonStreamedRequestIsCancelledWhenItsClientGoesAway) {
  ServerProcess server({"--model", kModel, "--max-batch", "1", "--compute", kCompute});
  ASSERT_TRUE(server.listening()) << server.log();
  const std::string body =
      R"({"prompt": "Tell a long story.", "max_tokens": 1000, "temperature": 0})";
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(server.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::send(fd, request.data(), request.size(), 0), ssize_t(request.size()));
  ::close(fd);

  // The request's log line is written when it ends; a deadline only keeps a broken server from
  // hanging the test.
  json line;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (line.is_null() && std::chrono::steady_clock::now() < deadline) {
    for (const json& l : log_lines(server.log()))
      if (l.value("endpoint", "") == "/v1/completions") line = l;
    if (line.is_null()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(line.is_null()) << server.log();
  EXPECT_EQ(line.value("finish_reason", ""), "cancelled") << line.dump();
  EXPECT_LT(line.value("completion_tokens", 1000), 1000) << line.dump();
  // The one slot is free again: the next request is answered.
  httplib::Client http("127.0.0.1", server.port());
  http.set_read_timeout(60, 0);
  auto res =
      http.Post("/v1/completions", R"({"prompt": "Hello", "max_tokens": 4})", "application/json");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(server.stop(SIGINT), 0) << server.log();
}

// The data of each server-sent event of a stream, up to (not including) "[DONE]".
std::vector<json> events_of(const std::string& body) {
  std::vector<json> out;
  std::istringstream in(body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("data: ", 0) != 0 || line == "data: [DONE]") continue;
    out.push_back(json::parse(line.substr(6), nullptr, false));
  }
  return out;
}

// n answers in one request: n choices indexed 0..n-1, usage counting the prompt once and every
// choice's tokens. Without temperature the server samples (OpenAI's default, temperature 1), so
// the choices differ; at temperature 0 they are one greedy answer. Streamed, the n choices come
// interleaved, each chunk naming its choice: every choice reassembles to the same text as the
// whole answer's (seed, seed + 1, ... per choice), with one finish_reason each and the usage
// totals once at the end.
TEST(ServeChoices, NChoicesSampledWithTheDefaultTemperatureWholeAndStreamed) {
  ServerProcess server({"--model", kModel, "--compute", kCompute});
  ASSERT_TRUE(server.listening()) << server.log();
  httplib::Client http("127.0.0.1", server.port());
  http.set_read_timeout(120, 0);
  auto post = [&](const char* path, const json& body) {
    auto res = http.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(res) << httplib::to_string(res.error());
    return res ? std::make_pair(res->status, res->body) : std::make_pair(0, std::string());
  };
  const json ask = {{"prompt", "Once upon a time"}, {"max_tokens", 12}, {"n", 3}, {"seed", 5}};
  auto [status, body] = post("/v1/completions", ask);
  ASSERT_EQ(status, 200) << body;
  const json sampled = json::parse(body, nullptr, false);
  ASSERT_EQ(sampled["choices"].size(), 3u) << sampled.dump();
  std::set<std::string> texts;
  for (int i = 0; i < 3; ++i) {
    const json& c = sampled["choices"][i];
    EXPECT_EQ(c["index"], i);
    EXPECT_TRUE(c["finish_reason"] == "length" || c["finish_reason"] == "stop") << c.dump();
    texts.insert(c["text"].get<std::string>());
  }
  EXPECT_EQ(texts.size(), 3u) << sampled.dump();
  const int64_t tokens = sampled["usage"]["completion_tokens"].get<int64_t>();
  EXPECT_GT(tokens, 12);  // more than one choice's worth
  EXPECT_LE(tokens, 36);
  EXPECT_EQ(sampled["usage"]["prompt_tokens"].get<int64_t>() + tokens,
            sampled["usage"]["total_tokens"].get<int64_t>());

  auto [greedy_status, greedy_body] =
      post("/v1/completions",
           {{"prompt", "Once upon a time"}, {"max_tokens", 12}, {"n", 2}, {"temperature", 0}});
  ASSERT_EQ(greedy_status, 200) << greedy_body;
  const json greedy = json::parse(greedy_body, nullptr, false);
  ASSERT_EQ(greedy["choices"].size(), 2u);
  EXPECT_EQ(greedy["choices"][0]["text"], greedy["choices"][1]["text"]);

  json streamed_ask = ask;
  streamed_ask["stream"] = true;
  streamed_ask["stream_options"] = {{"include_usage", true}};
  auto [stream_status, stream_body] = post("/v1/completions", streamed_ask);
  ASSERT_EQ(stream_status, 200) << stream_body;
  EXPECT_EQ(stream_body.substr(stream_body.size() - 14), "data: [DONE]\n\n");
  const std::vector<json> events = events_of(stream_body);
  ASSERT_GE(events.size(), 4u) << stream_body.substr(0, 400);
  std::vector<std::string> text(3);
  std::vector<int> finishes(3, 0);
  std::set<int> order;  // choices seen before the first finish: they decode together
  for (size_t k = 0; k + 1 < events.size(); ++k) {
    const json& e = events[k];
    EXPECT_FALSE(e.contains("usage")) << e.dump();  // the totals come once, last
    ASSERT_EQ(e["choices"].size(), 1u) << e.dump();
    const json& c = e["choices"][0];
    const int i = c["index"].get<int>();
    ASSERT_TRUE(i >= 0 && i < 3) << e.dump();
    text[size_t(i)] += c["text"].get<std::string>();
    if (!c["finish_reason"].is_null()) {
      ++finishes[size_t(i)];
      EXPECT_EQ(c["finish_reason"], sampled["choices"][i]["finish_reason"]);
    }
    if (finishes == std::vector<int>(3, 0)) order.insert(i);
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(text[size_t(i)], sampled["choices"][i]["text"]) << "choice " << i;
    EXPECT_EQ(finishes[size_t(i)], 1) << "choice " << i;
  }
  EXPECT_EQ(order.size(), 3u);
  const json& usage = events.back();
  EXPECT_TRUE(usage["choices"].empty()) << usage.dump();
  EXPECT_EQ(usage["usage"], sampled["usage"]) << usage.dump();

  // Chat: each choice opens with its role; the greedy choices are the same text.
  auto [chat_status, chat_body] =
      post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                                    {"max_tokens", 8},
                                    {"n", 2},
                                    {"temperature", 0},
                                    {"stream", true}});
  ASSERT_EQ(chat_status, 200) << chat_body;
  std::vector<std::string> chat(2);
  std::vector<int> roles(2, 0), chat_finishes(2, 0);
  for (const json& e : events_of(chat_body)) {
    ASSERT_EQ(e["choices"].size(), 1u) << e.dump();
    const json& c = e["choices"][0];
    const size_t i = c["index"].get<size_t>();
    ASSERT_LT(i, 2u);
    if (c["delta"].contains("role")) ++roles[i];
    chat[i] += c["delta"].value("content", "");
    if (!c["finish_reason"].is_null()) ++chat_finishes[i];
  }
  EXPECT_EQ(roles, std::vector<int>({1, 1}));
  EXPECT_EQ(chat_finishes, std::vector<int>({1, 1}));
  EXPECT_FALSE(chat[0].empty());
  EXPECT_EQ(chat[0], chat[1]);
  EXPECT_EQ(server.stop(SIGTERM), 0) << server.log();
}

}  // namespace
}  // namespace glm4
