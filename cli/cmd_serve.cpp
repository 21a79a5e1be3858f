// glm4 serve: an OpenAI-compatible HTTP server over one base model and named adapters, with
// continuous batching (serve/). SIGINT/SIGTERM stop taking requests, let the in-flight ones
// finish, and exit 0.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <thread>

#include "cli/cli_common.h"
#include "cli/flag_groups.h"
#include "cli/model_session.h"
#include "model/adapter/adapter_io.h"
#include "serve/http_server.h"
#include "serve/listen_check.h"
#include "serve/sampling_defaults.h"

namespace glm4::cli {

namespace {
struct ServeFlags {
  ModelFlags model;
  std::vector<std::string> adapters;  // NAME=DIR
  std::string model_name, host = "127.0.0.1", api_key, max_body = "1MB", compute = "auto";
  int port = 8080;
  int64_t max_batch = 8, max_queue = 64, max_kv_size = 0;
  std::string kv_cache = "f32";
};

int g_signal_pipe[2] = {-1, -1};

void on_stop_signal(int sig) {
  const char c = char(sig);
  const int saved = errno;
  if (write(g_signal_pipe[1], &c, 1) < 0) {
  }
  errno = saved;
}

struct AdapterFlag {
  std::string name, dir;
};

AdapterFlag parse_adapter_flag(const std::string& text) {
  const size_t eq = text.find('=');
  GLM4_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < text.size(), "--adapter ", text,
             ": expected NAME=DIR (the name clients send as \"model\")");
  AdapterFlag a{text.substr(0, eq), text.substr(eq + 1)};
  for (char c : a.name)
    GLM4_CHECK(
        std::isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.' || c == ':' || c == '/',
        "--adapter ", text, ": the name may hold letters, digits and - _ . : / only");
  return a;
}

std::string default_model_name(const std::string& dir) {
  std::filesystem::path p = std::filesystem::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

void run_serve(const ServeFlags& f) {
  GLM4_CHECK(f.port >= 0 && f.port <= 65535, "--port must be in [0, 65535], got ", f.port);
  // A handler on whichever thread the signal lands (OpenBLAS starts threads before main) that
  // only writes a byte to a pipe; the waiter thread below reads it and shuts down.
  GLM4_CHECK(pipe(g_signal_pipe) == 0, "glm4 serve: cannot create a pipe for signals");
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);

  serve::HttpOptions http;
  http.host = f.host;
  http.port = f.port;
  http.api_key = f.api_key;
  if (const char* key = std::getenv("GLM4_API_KEY"); http.api_key.empty() && key)
    http.api_key = key;
  http.max_body_bytes = parse_size(f.max_body, "--max-body");
  GLM4_CHECK(http.max_body_bytes > 0, "--max-body must be positive");

  // The address, the tokenizer and the adapters are checked before the weights, which may take
  // minutes to load.
  serve::check_listen_address(http.host, http.port);
  ModelSession s = open_without_weights(f.model.dir, "", {"serve"});
  const std::string base_name =
      f.model_name.empty() ? default_model_name(f.model.dir) : f.model_name;
  std::vector<AdapterFlag> adapters;
  for (const std::string& text : f.adapters) {
    AdapterFlag a = parse_adapter_flag(text);
    GLM4_CHECK(
        a.name != base_name && std::none_of(adapters.begin(), adapters.end(),
                                            [&](const AdapterFlag& b) { return b.name == a.name; }),
        "--adapter ", text, ": the name \"", a.name, "\" is taken");
    with_flag("--adapter", text, [&] { read_adapter_info(a.dir); });
    adapters.push_back(a);
  }
  load_weights(s, f.compute, f.model.memory());
  serve::ServedModels served;
  served.model = s.model.get();
  served.tokenizer = s.tokenizer.get();
  served.format = s.format;
  served.base_name = base_name;
  served.eos_ids = s.stop_ids(false);
  served.chat_stop_ids = s.stop_ids(true);
  served.token_trie = std::make_shared<const grammar::TokenTrie>(*s.tokenizer);  // response_format
  served.created = int64_t(std::time(nullptr));
  const serve::SamplingDefaults defaults = serve::load_sampling_defaults(f.model.dir);
  served.sampling_defaults = defaults.sampling;
  for (size_t i = 0; i < adapters.size(); ++i) {
    const AdapterFlag& a = adapters[i];
    std::string warning = with_flag("--adapter", f.adapters[i], [&] {
      return load_resident_adapter(*s.model, a.dir, served.adapter_names.size(), f.model.dir);
    });
    if (!warning.empty()) std::fprintf(stderr, "warning: %s\n", warning.c_str());
    served.adapter_names.push_back(a.name);
  }

  serve::SchedulerConfig sc;
  sc.max_batch = f.max_batch;
  sc.max_queue = f.max_queue;
  sc.max_kv_size = f.max_kv_size;
  sc.kv_cache_dtype = kv_cache_dtype(f.kv_cache);
  serve::Scheduler scheduler(*s.model, s.tokenizer.get(), sc);
  serve::HttpServer server(served, scheduler, http, stdout);
  const int port = server.bind();
  print_json({{"event", "listening"},
              {"host", f.host},
              {"port", port},
              {"model", served.base_name},
              {"adapters", served.adapter_names},
              {"max_batch", sc.max_batch},
              {"max_queue", sc.max_queue},
              {"sampling_defaults",
               {{"temperature", defaults.sampling.temperature},
                {"top_p", defaults.sampling.top_p},
                {"top_k", defaults.sampling.top_k},
                {"from", defaults.source}}},
              {"compute", s.compute.describe()},
              {"weights", s.model->loaded.describe()}});

  std::thread waiter([&] {
    char sig = 0;
    while (read(g_signal_pipe[0], &sig, 1) < 0 && errno == EINTR) {
    }
    if (sig == 0) return;  // run() ended on its own
    print_json({{"event", "shutdown"}, {"signal", sig == SIGINT ? "SIGINT" : "SIGTERM"}});
    server.shutdown();
  });
  server.run();
  const char none = 0;
  if (write(g_signal_pipe[1], &none, 1) < 0) std::perror("glm4 serve");
  waiter.join();
  print_json({{"event", "stopped"}});
}
}  // namespace

void add_serve_command(CLI::App& parent, std::vector<Command>& out) {
  CLI::App* app =
      parent.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
  auto f = std::make_shared<ServeFlags>();
  f->model.add(app, "Model directory (with tokenizer files)");
  app->add_option("--adapter", f->adapters,
                  "NAME=DIR: a LoRA adapter clients choose with \"model\": NAME (repeatable)");
  app->add_option("--model-name", f->model_name,
                  "The base model's name in the API (default: the directory's name)");
  app->add_option("--host", f->host, "Address to listen on (default 127.0.0.1)");
  app->add_option("--port", f->port, "Port (default 8080; 0 = any free port, printed at start)");
  app->add_option(
      "--api-key", f->api_key,
      "Require 'Authorization: Bearer KEY' on /v1/ requests (or set GLM4_API_KEY, kept out of ps)");
  app->add_option("--max-batch", f->max_batch,
                  "Requests decoded together (slots, rows per forward pass; default 8)");
  app->add_option("--max-queue", f->max_queue,
                  "Requests waiting for a slot before 429 (default 64)");
  app->add_option("--max-kv-size", f->max_kv_size,
                  "Keep at most N cached tokens per request (first 4 + most recent)");
  add_kv_cache_flag(app, f->kv_cache);
  app->add_option("--max-body", f->max_body,
                  "Largest request body (default 1MB; larger ones get 413)");
  add_compute_flag(app, f->compute);
  f->model.add_memory_flags(app);
  out.push_back({app, [f] { run_serve(*f); }});
}

}  // namespace glm4::cli
