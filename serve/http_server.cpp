// Routes of `glm4 serve` on cpp-httplib. Completions are queued on the scheduler, one slot per
// choice (n); a non-streamed request waits for every choice's final event, a streamed one writes
// each event as a server-sent event (serve/choice_streams.h); either cancels its slots when the
// client is gone.
#include "serve/http_server.h"

#include <httplib.h>

#include <atomic>
#include <ctime>
#include <mutex>
#include <random>
#include <thread>

#include "base/check.h"
#include "serve/choice_streams.h"
#include "serve/peer_socket.h"

namespace glm4::serve {

namespace {
using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::milliseconds(500);

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string random_id(const char* prefix) {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lock(mu);
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)rng());
  return std::string(prefix) + buf;
}

uint64_t random_seed() {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lock(mu);
  return rng();
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump(error_body(e)), "application/json");
}

// What a request leaves behind for its log line.
struct RequestLog {
  std::string endpoint, model, finish_reason = "", error;
  int status = 200;
  bool stream = false;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  Clock::time_point start = Clock::now();
  double first_token_s = -1;
};
}  // namespace

bool equal_constant_time(const std::string& a, const std::string& b) {
  const size_t n = std::max(a.size(), b.size());
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? (unsigned char)a[i] : 0,
                        y = i < b.size() ? (unsigned char)b[i] : 0;
    diff = diff | (x ^ y);
  }
  return diff == 0;
}

struct HttpServer::State {
  std::atomic<int> in_flight{0};  // requests whose response is not fully written
  std::mutex log_mu;
};

HttpServer::HttpServer(const ServedModels& served, Scheduler& scheduler, HttpOptions options,
                       std::FILE* log)
    : served_(served),
      scheduler_(scheduler),
      options_(std::move(options)),
      log_(log),
      http_(std::make_unique<httplib::Server>()),
      state_(std::make_unique<State>()) {
  GLM4_CHECK(
      served_.tokenizer,
      "glm4 serve: the model directory has no tokenizer (tokenizer.json or tokenizer.model)");
  const int threads = options_.http_threads > 0
                          ? options_.http_threads
                          : int(scheduler_.config().max_batch + scheduler_.config().max_queue + 8);
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  // The hard cap; bodies between max_body_bytes and this are read and answered with 413.
  http_->set_payload_max_length(std::max<size_t>(options_.max_body_bytes * 16, size_t(64) << 20));
  // An idle keep-alive connection holds a thread, and a shutdown waits for it: keep that short.
  http_->set_keep_alive_timeout(2);
  routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  int port = options_.port;
  if (port == 0)
    port = http_->bind_to_any_port(options_.host);
  else if (!http_->bind_to_port(options_.host, port))
    port = -1;
  GLM4_CHECK(port > 0, "--host ", options_.host, " --port ", options_.port,
             ": cannot listen on this address");
  return port;
}

void HttpServer::run() { http_->listen_after_bind(); }

void HttpServer::shutdown() {
  scheduler_.drain(options_.drain_grace);
  // The scheduler sent every final event; give the writers a moment to put them on the wire.
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (state_->in_flight > 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  http_->stop();
}

void HttpServer::write_log(const json& line) {
  if (!log_) return;
  std::lock_guard<std::mutex> lock(state_->log_mu);
  std::fprintf(log_, "%s\n", dump(line).c_str());
  std::fflush(log_);
}

void HttpServer::routes() {
  httplib::Server& h = *http_;
  h.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (options_.api_key.empty() || req.path == "/health")
      return httplib::Server::HandlerResponse::Unhandled;
    if (equal_constant_time(req.get_header_value("Authorization"), "Bearer " + options_.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError(401, "Incorrect or missing API key: send 'Authorization: Bearer KEY'",
                             "", "invalid_api_key"));
    res.set_header("Connection", "close");
    write_log({{"time", utc_now()}, {"endpoint", req.path}, {"status", 401}});
    return httplib::Server::HandlerResponse::Handled;
  });
  h.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty() || res.content_provider_)
          return httplib::Server::HandlerResponse::Unhandled;
        std::string message = str_cat("HTTP ", res.status, " for ", req.method, " ", req.path);
        if (res.status == 404) message = "no route " + req.method + " " + req.path;
        send_error(res, ApiError(res.status, message, "", res.status == 404 ? "not_found" : ""));
        return httplib::Server::HandlerResponse::Handled;
      }));
  h.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        send_error(res, ApiError(500, what, "", "internal_error", "server_error"));
      });

  h.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    SchedulerStats s = scheduler_.stats();
    json body = {{"status", s.draining ? "draining" : "ok"},
                 {"slots_busy", s.live},
                 {"slots_total", scheduler_.config().max_batch},
                 {"queued", s.queued},
                 {"steps", s.steps}};
    res.status = s.draining ? 503 : 200;
    res.set_content(dump(body), "application/json");
  });
  h.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump(models_body(served_)), "application/json");
  });
  h.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    const json models = models_body(served_);
    for (const json& m : models["data"])
      if (m["id"] == req.matches[1].str()) return res.set_content(dump(m), "application/json");
    send_error(res, ApiError(404, "The model '" + req.matches[1].str() + "' does not exist",
                             "model", "model_not_found"));
  });
  auto post = [this, &h](const char* path, Endpoint endpoint) {
    h.Post(path, [this, path, endpoint](const httplib::Request& req, httplib::Response& res,
                                        const httplib::ContentReader& reader) {
      std::string body;
      bool too_large = false;
      reader([&](const char* data, size_t n) {
        if (body.size() + n > options_.max_body_bytes)
          too_large = true;
        else
          body.append(data, n);
        return true;  // read it all, so the client sees the answer rather than a reset
      });
      complete(req, res, path, endpoint, too_large ? nullptr : &body);
    });
  };
  post("/v1/chat/completions", Endpoint::Chat);
  post("/v1/completions", Endpoint::Completion);
}

void HttpServer::complete(const httplib::Request& req, httplib::Response& res, const char* path,
                          Endpoint endpoint, const std::string* body) {
  auto log = std::make_shared<RequestLog>();
  log->endpoint = path;
  auto finish_log = [this](const RequestLog& l) {
    const double seconds = seconds_since(l.start);
    json line = {{"time", utc_now()}, {"endpoint", l.endpoint}, {"status", l.status}};
    if (!l.model.empty()) line["model"] = l.model;
    if (l.status == 200) {
      line.update({{"stream", l.stream},
                   {"prompt_tokens", l.prompt_tokens},
                   {"completion_tokens", l.completion_tokens},
                   {"finish_reason", l.finish_reason},
                   {"seconds", seconds},
                   {"first_token_s", l.first_token_s},
                   {"tokens_per_s", seconds > 0 ? double(l.completion_tokens) / seconds : 0.0}});
    }
    if (!l.error.empty()) line["error"] = l.error;
    write_log(line);
  };
  std::vector<std::shared_ptr<SlotHandle>> handles;  // one per choice (n)
  ParsedRequest parsed;
  try {
    if (!body)
      throw ApiError(413, str_cat("the request body exceeds ", options_.max_body_bytes, " bytes"),
                     "", "request_too_large");
    parsed = parse_request(*body, endpoint);
    log->model = parsed.model.empty() ? served_.base_name : parsed.model;
    log->stream = parsed.stream;
    const SlotRequest request = build_slot_request(parsed, served_, random_seed());
    log->prompt_tokens = int64_t(request.prompt.size());
    for (int64_t i = 0; i < parsed.n; ++i) {
      SlotRequest r = request;
      r.sampling.seed += uint64_t(i);  // n answers, n draws
      Scheduler::Admission admission;
      std::shared_ptr<SlotHandle> h = scheduler_.submit(std::move(r), &admission);
      if (admission != Scheduler::Admission::Accepted) {
        for (auto& taken : handles) taken->cancel();
        if (admission == Scheduler::Admission::QueueFull)
          throw ApiError(429,
                         "the server is busy: every slot and queue place is taken; retry later", "",
                         "rate_limit_exceeded", "rate_limit_error");
        throw ApiError(503, "the server is shutting down", "", "unavailable", "server_error");
      }
      handles.push_back(std::move(h));
    }
  } catch (const ApiError& e) {
    send_error(res, e);
    log->status = e.status;
    log->error = e.what();
    finish_log(*log);
    return;
  }
  const ResponseMeta meta{endpoint, random_id(endpoint == Endpoint::Chat ? "chatcmpl-" : "cmpl-"),
                          log->model, int64_t(std::time(nullptr))};
  const bool want_logprobs = parsed.top_logprobs >= 0;
  // How a chat reply is read (reasoning, tool calls); not at all for plain-text replies.
  const ReplyReading reading =
      endpoint == Endpoint::Chat ? reply_reading(served_.format, parsed.chat_options, parsed.tools)
                                 : ReplyReading{};

  if (!parsed.stream) {
    ++state_->in_flight;
    struct Answer {
      std::string text;
      std::vector<size_t> turns;  // where in text the model began a new turn
      std::vector<TokenLogprob> logprobs;
      SlotEvent last;  // the final event once done
      bool done = false;
    };
    std::vector<Answer> answers(handles.size());
    const PeerSocket peer(req);
    bool client_gone = false;
    const auto poll = handles.size() == 1 ? kPoll : std::chrono::milliseconds(20);
    for (size_t open = handles.size(); open > 0;) {
      if (!client_gone && peer.gone()) {  // nobody will read the answer: free the slots
        client_gone = true;
        for (auto& h : handles) h->cancel();
      }
      for (size_t i = 0; i < handles.size(); ++i) {
        Answer& a = answers[i];
        SlotEvent e;
        if (a.done || !handles[i]->next(&e, poll)) continue;
        if (log->first_token_s < 0 && !e.ids.empty())
          log->first_token_s = seconds_since(log->start);
        a.text += e.text;
        if (e.new_turn) a.turns.push_back(a.text.size());
        for (TokenLogprob& lp : e.logprobs) a.logprobs.push_back(std::move(lp));
        if (!e.done) continue;
        a.last = std::move(e);
        a.done = true;
        --open;
      }
    }
    log->prompt_tokens = answers[0].last.prompt_tokens;
    log->completion_tokens = 0;
    std::string failed;  // "error" or "cancelled" when a choice ended so
    std::vector<ChoiceText> choices;
    for (const Answer& a : answers) {
      log->completion_tokens += a.last.completion_tokens;
      const std::string& reason = a.last.finish_reason;
      if ((reason == "error" || reason == "cancelled") && failed != "error") failed = reason;
      choices.push_back({a.text, reason, want_logprobs ? &a.logprobs : nullptr});
      if (reading.parse) {
        ChatReply reply(reading);
        reply.start();
        size_t from = 0;
        for (size_t at : a.turns) {
          reply.push(a.text.substr(from, at - from), true);
          from = at;
        }
        reply.push(a.text.substr(from));
        reply.finish();
        choices.back().message = reply.message();
        choices.back().finish_reason = reply.finish_reason(reason);
      }
    }
    log->finish_reason = failed.empty() ? choices[0].finish_reason : failed;
    if (client_gone && failed == "cancelled") {
      // Nothing to send. The log reads as for a streamed request whose client went away: status
      // 200, finish_reason "cancelled".
    } else if (!failed.empty()) {
      const bool error = failed == "error";
      std::string why;
      for (const Answer& a : answers)
        if (!a.last.error.empty()) why = a.last.error;
      send_error(res, ApiError(error ? 500 : 503,
                               error ? "generation failed: " + why
                                     : "the request was cancelled (shutdown)",
                               "", error ? "internal_error" : "unavailable", "server_error"));
      log->status = res.status;
    } else {
      res.set_content(dump(completion_body(meta, choices, log->prompt_tokens,
                                           log->completion_tokens, *served_.tokenizer)),
                      "application/json");
    }
    finish_log(*log);
    --state_->in_flight;
    return;
  }

  auto st = std::make_shared<ChoiceStreams>(meta, reading, handles.size(), want_logprobs,
                                            parsed.include_usage, *served_.tokenizer);
  struct Progress {
    bool opened = false, closed = false;
  };
  auto progress = std::make_shared<Progress>();
  ++state_->in_flight;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [handles, st, progress, log](size_t, httplib::DataSink& sink) {
        auto send = [&](const std::vector<json>& chunks) {
          for (const json& c : chunks) {
            const std::string event = "data: " + dump(c) + "\n\n";
            if (!sink.write(event.data(), event.size())) return false;
          }
          return true;
        };
        auto take = [&](size_t i, const SlotEvent& e) {
          if (log->first_token_s < 0 && !e.ids.empty())
            log->first_token_s = seconds_since(log->start);
          return send(st->push(i, e));
        };
        if (progress->closed) {
          sink.done();
          return true;
        }
        if (!progress->opened) {
          progress->opened = true;
          if (!send(st->open())) return false;
        }
        // The choices decode together: take what each has ready, waiting on one only when none
        // had anything.
        bool any = false;
        for (size_t i = 0; i < handles.size() && !st->failed(); ++i) {
          SlotEvent e;
          if (st->finished(i) || !handles[i]->next(&e, std::chrono::milliseconds(0))) continue;
          any = true;
          if (!take(i, e)) return false;
        }
        if (!any && !st->failed() && !st->all_finished()) {
          size_t i = 0;
          while (st->finished(i)) ++i;
          SlotEvent e;
          const auto wait = handles.size() == 1 ? kPoll : std::chrono::milliseconds(20);
          if (!handles[i]->next(&e, wait)) return true;  // called again: nothing to write yet
          if (!take(i, e)) return false;
        }
        if (!st->failed() && !st->all_finished()) return true;
        if (st->failed())  // the others have nobody to write to
          for (auto& h : handles) h->cancel();
        const std::string done = "data: [DONE]\n\n";
        progress->closed = true;
        const bool ok = (st->failed() || send(st->close())) && sink.write(done.data(), done.size());
        if (ok) sink.done();
        return ok;
      },
      [this, handles, st, log, finish_log](bool) {
        log->prompt_tokens = st->prompt_tokens() > 0 ? st->prompt_tokens() : log->prompt_tokens;
        log->completion_tokens = st->completion_tokens();
        log->finish_reason = st->finish_reason();
        if (!st->failed() && !st->all_finished()) {
          // The client went away (or the write failed): free the slots.
          for (auto& h : handles) h->cancel();
          log->finish_reason = "cancelled";
        }
        finish_log(*log);
        --state_->in_flight;
      });
}

}  // namespace glm4::serve
