// The HTTP side of `glm4 serve` (cpp-httplib): routes, API-key check, body limit, SSE streaming,
// one JSON log line per request, and a shutdown that lets in-flight requests finish.
#pragma once
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "serve/openai_schema.h"
#include "serve/scheduler.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace glm4::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                               // 0: any free port (bind() returns it)
  std::string api_key;                           // empty: no authentication
  size_t max_body_bytes = 1 << 20;               // larger bodies get 413
  int http_threads = 0;                          // 0: max_batch + max_queue + 8
  std::chrono::milliseconds drain_grace{30000};  // shutdown waits this long for in-flight requests
};

class HttpServer {
 public:
  // `served` and `scheduler` must outlive the server; log lines go to `log`.
  HttpServer(const ServedModels& served, Scheduler& scheduler, HttpOptions options, std::FILE* log);
  ~HttpServer();

  int bind();  // throws naming --host/--port when the address cannot be bound; returns the port
  void run();  // serves until shutdown() (blocks)
  // Any thread: refuses new requests (503), waits for the in-flight ones (cancelling what is left
  // after drain_grace), then stops the listener so run() returns.
  void shutdown();

 private:
  struct State;
  void routes();
  // A completion request; `body` is null when it was over max_body_bytes.
  void complete(const httplib::Request& req, httplib::Response& res, const char* path,
                Endpoint endpoint, const std::string* body);
  void write_log(const json& line);

  const ServedModels& served_;
  Scheduler& scheduler_;
  HttpOptions options_;
  std::FILE* log_;
  std::unique_ptr<httplib::Server> http_;
  std::unique_ptr<State> state_;
};

// True when a and b are equal; the time taken depends only on their lengths.
bool equal_constant_time(const std::string& a, const std::string& b);

}  // namespace glm4::serve
