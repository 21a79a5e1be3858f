// glm4 chat: an interactive multi-turn chat that reuses the KV cache.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "autograd/node.h"
#include "cli/cli_common.h"
#include "cli/flag_groups.h"
#include "cli/model_session.h"
#include "cli/reply_display.h"
#include "infer/generator.h"
#include "io/tokenizer/stream_decoder.h"

namespace glm4::cli {

namespace {
struct ChatFlags {
  ModelFlags model;
  AdapterFlags adapter;
  SamplingFlags sampling;
  ChatTurnFlags turn;
  std::string compute = "auto";
};

void run_chat(const ChatFlags& f) {
  ModelSession s = open_session(f.model.dir, f.adapter.dir, f.compute, f.model.memory(), {"chat"});
  GenerationConfig cfg = f.sampling.config(s, true);
  NoGradGuard no_grad;
  Generator gen(*s.model, cfg);
  std::vector<ChatMessage> messages = f.turn.opening();
  const ChatOptions options = f.turn.options();
  const bool tools = !options.tools.empty();
  gen.set_call_watch(f.turn.call_watch(s, options, cfg));
  std::string line;
  while (true) {
    std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line) || line.empty() || line == "/exit") break;
    // "/tool RESULT" answers the model's last tool call; anything else is the user's turn.
    if (tools && line.rfind("/tool ", 0) == 0) {
      messages.push_back({"tool", line.substr(6)});
      if (messages.size() >= 2 && !messages[messages.size() - 2].tool_calls.empty())
        messages.back().tool_call_id = messages[messages.size() - 2].tool_calls.front().id;
      const std::string& id = messages.back().tool_call_id;
      std::fprintf(stderr, "(tool result%s)\n", id.empty() ? "" : (" for " + id).c_str());
    } else {
      messages.push_back({"user", line});
    }
    std::vector<int32_t> ids = s.render(messages, options);
    const auto& history = gen.history();
    bool extends = !history.empty() && history.size() < ids.size() &&
                   std::equal(history.begin(), history.end(), ids.begin());
    if (extends)
      gen.append(std::span<const int32_t>(ids).subspan(history.size()));
    else
      gen.start(ids);
    StreamDecoder stream(*s.tokenizer, true);
    std::vector<int32_t> reply;
    if (tools) {  // reasoning, answer and calls shown apart; the calls kept for /tool
      ReplyDisplay display(f.turn.reply_options(s.format, options), stdout);
      const std::optional<int32_t> turn = s.tokenizer->special_id("<|assistant|>");
      while (auto id = gen.next()) {
        reply.push_back(*id);
        display.push(stream.push(*id));
        if (id == turn) display.turn();
      }
      display.push(stream.flush());
      display.finish();
      std::printf("\n");
      messages.push_back(display.message());
      if (!display.reply().calls.empty())
        std::fprintf(stderr, "(answer the call with /tool RESULT)\n");
      continue;
    }
    ReplyText text(reply_starts_with_newline(s.format));  // the template's "\n" is not shown
    while (auto id = gen.next()) {
      reply.push_back(*id);
      std::fputs(text.push(stream.push(*id)).c_str(), stdout);
      std::fflush(stdout);
    }
    std::fputs(text.push(stream.flush()).c_str(), stdout);
    std::printf("\n");
    // Kept without its "\n", which the template writes back ("\n" + content): the next turn's
    // prompt then starts with the tokens already in the cache.
    messages.push_back(
        {"assistant",
         ReplyText(reply_starts_with_newline(s.format)).whole(s.tokenizer->decode(reply, true))});
  }
}
}  // namespace

void add_chat_command(CLI::App& parent, std::vector<Command>& out) {
  CLI::App* app =
      parent.add_subcommand("chat",
                            "Interactive multi-turn chat (empty line or /exit quits; with --tools, "
                            "/tool RESULT answers a tool call)");
  auto f = std::make_shared<ChatFlags>();
  f->model.add(app);
  f->adapter.add(app);
  f->sampling.add(app);
  f->turn.add(app, false);
  add_compute_flag(app, f->compute);
  f->model.add_memory_flags(app);
  out.push_back({app, [f] { run_chat(*f); }});
}

}  // namespace glm4::cli
