// glm4 generate: stream a continuation (or a chat reply) of one prompt, or of every prompt of a
// file in one batch; glm4 chat: an interactive multi-turn chat that reuses the KV cache.
#include <cstdio>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "autograd/node.h"
#include "cli/cli_common.h"
#include "cli/model_session.h"
#include "infer/generator.h"
#include "io/tokenizer/stream_decoder.h"
#include "base/peak_rss.h"

namespace glm4::cli {

namespace {
struct SamplingFlags {
  int max_tokens = 256;
  float temp = 0, top_p = 1, min_p = 0, repeat_penalty = 1;
  int top_k = 0;
  uint64_t seed = 0;
  int64_t max_kv_size = 0;
  std::string adapter, system, compute = "auto";

  void add(CLI::App* app) {
    app->add_option("--adapter", adapter, "LoRA adapter directory (PEFT or MLX), applied live");
    app->add_option("--max-tokens", max_tokens, "Tokens to generate at most (default 256)");
    app->add_option("--temp", temp, "Sampling temperature; 0 = greedy (default 0)");
    app->add_option("--top-k", top_k, "Keep the K most likely tokens; 0 = off");
    app->add_option("--top-p", top_p, "Nucleus sampling threshold (default 1 = off)");
    app->add_option("--min-p", min_p, "Drop tokens below min-p times the top probability");
    app->add_option("--repeat-penalty", repeat_penalty, "Penalty for tokens of the last 64 (default 1)");
    app->add_option("--seed", seed, "Sampling seed (default 0)");
    app->add_option("--max-kv-size", max_kv_size, "Keep at most N cached tokens (first 4 + most recent)");
    app->add_option("--system", system, "System message (with --chat)");
    add_compute_flag(app, compute);
  }
  GenerationConfig config(const ModelSession& s, bool chat) const {
    GenerationConfig g;
    g.max_tokens = max_tokens;
    g.sampling.temperature = temp;
    g.sampling.top_k = top_k;
    g.sampling.top_p = top_p;
    g.sampling.min_p = min_p;
    g.sampling.repeat_penalty = repeat_penalty;
    g.sampling.seed = seed;
    g.max_kv_size = max_kv_size;
    g.stop_ids = s.stop_ids(chat);
    validate_generation_config(g);
    return g;
  }
};

std::vector<int32_t> prompt_ids(const ModelSession& s, const std::string& prompt, bool chat,
                                const std::string& system) {
  if (!chat) return s.encode_prompt(prompt);
  std::vector<ChatMessage> messages;
  if (!system.empty()) messages.push_back({"system", system});
  messages.push_back({"user", prompt});
  return s.render(messages);
}

void print_stats(const GenerationStats& st) {
  std::fprintf(stderr, "\nprompt: %lld tokens, %.1f tokens/s | generation: %lld tokens, %.1f tokens/s | peak memory %.0f MB\n",
               (long long)st.prompt_tokens, st.prefill_tokens_per_second(), (long long)st.generated_tokens,
               st.decode_tokens_per_second(), peak_rss_mb());
}
}  // namespace

void add_generate_command(CLI::App& parent, std::vector<Command>& out) {
  CLI::App* app = parent.add_subcommand("generate", "Generate text from a prompt");
  struct Flags {
    std::string model, prompt, tokens, prompts_file;
    bool chat = false, json = false;
    SamplingFlags sampling;
  };
  auto f = std::make_shared<Flags>();
  app->add_option("--model", f->model, "Model directory")->required();
  auto* p = app->add_option("--prompt", f->prompt, "Prompt text");
  auto* t = app->add_option("--tokens", f->tokens, "Prompt as token ids: 1,2,3");
  auto* pf = app->add_option("--prompts-file", f->prompts_file, "One prompt a line (text or {\"prompt\":...}); batched");
  p->excludes(t)->excludes(pf);
  t->excludes(pf);
  app->add_flag("--chat", f->chat, "Wrap the prompt in the model's chat template");
  app->add_flag("--json", f->json, "Print one JSON object (ids, text, speeds) instead of streaming");
  f->sampling.add(app);
  out.push_back({app, [f] {
    GLM4_CHECK(!f->prompt.empty() || !f->tokens.empty() || !f->prompts_file.empty(),
               "one of --prompt, --tokens or --prompts-file is required");
    ModelSession s = open_session(f->model, f->sampling.adapter, f->sampling.compute);
    GenerationConfig cfg = f->sampling.config(s, f->chat);
    NoGradGuard no_grad;
    if (!f->prompts_file.empty()) {
      std::ifstream in(f->prompts_file);
      GLM4_CHECK(in, "--prompts-file ", f->prompts_file, ": cannot read the file");
      std::vector<std::vector<int32_t>> prompts;
      std::string line;
      for (int64_t n = 1; std::getline(in, line); ++n) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        std::string text = line;
        if (line[0] == '{') {
          nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
          GLM4_CHECK(j.is_object() && j.contains("prompt") && j["prompt"].is_string(), "--prompts-file ",
                     f->prompts_file, ":", n, ": expected {\"prompt\": \"...\"}");
          text = j["prompt"].get<std::string>();
        }
        prompts.push_back(prompt_ids(s, text, f->chat, f->sampling.system));
      }
      GLM4_CHECK(!prompts.empty(), "--prompts-file ", f->prompts_file, ": no prompts");
      auto outputs = generate_batch(*s.model, prompts, cfg);
      for (size_t i = 0; i < outputs.size(); ++i) {
        std::string text = s.tokenizer ? s.tokenizer->decode(outputs[i], true) : "";
        if (f->json) {
          nlohmann::json line = {{"prompt_ids", prompts[i]}, {"ids", outputs[i]}, {"text", text}};
          line.update(kernel_report(s.compute).fields());
          std::printf("%s\n", line.dump().c_str());
        } else {
          std::printf("%s\n", text.c_str());
        }
      }
      return;
    }
    std::vector<int32_t> prompt = !f->tokens.empty()
        ? parse_token_list(f->tokens, "--tokens", s.model->config.vocab_size)
        : prompt_ids(s, f->prompt, f->chat, f->sampling.system);
    Generator gen(*s.model, cfg);
    gen.start(prompt);
    std::vector<int32_t> ids;
    std::unique_ptr<StreamDecoder> stream;
    if (s.tokenizer) stream = std::make_unique<StreamDecoder>(*s.tokenizer, true);
    std::string text;
    while (auto id = gen.next()) {
      ids.push_back(*id);
      if (!stream) continue;
      std::string piece = stream->push(*id);
      text += piece;
      if (!f->json) {
        std::fputs(piece.c_str(), stdout);
        std::fflush(stdout);
      }
    }
    if (stream) {
      std::string rest = stream->flush();
      text += rest;
      if (!f->json) std::fputs(rest.c_str(), stdout);
    }
    GenerationStats st = gen.stats();
    if (f->json) {
      nlohmann::json line = {{"prompt_ids", prompt}, {"ids", ids}, {"text", text},
                             {"prefill_tps", st.prefill_tokens_per_second()},
                             {"decode_tps", st.decode_tokens_per_second()},
                             {"peak_rss_mb", peak_rss_mb()}};
      line.update(kernel_report(s.compute).fields());
      std::printf("%s\n", line.dump().c_str());
    } else {
      std::printf("\n");
      print_stats(st);
    }
  }});
}

void add_chat_command(CLI::App& parent, std::vector<Command>& out) {
  CLI::App* app = parent.add_subcommand("chat", "Interactive multi-turn chat (empty line or /exit quits)");
  struct Flags {
    std::string model;
    SamplingFlags sampling;
  };
  auto f = std::make_shared<Flags>();
  app->add_option("--model", f->model, "Model directory")->required();
  f->sampling.add(app);
  out.push_back({app, [f] {
    ModelSession s = open_session(f->model, f->sampling.adapter, f->sampling.compute);
    s.require_tokenizer("chat");
    GenerationConfig cfg = f->sampling.config(s, true);
    NoGradGuard no_grad;
    Generator gen(*s.model, cfg);
    std::vector<ChatMessage> messages;
    if (!f->sampling.system.empty()) messages.push_back({"system", f->sampling.system});
    std::string line;
    while (true) {
      std::fprintf(stderr, "> ");
      if (!std::getline(std::cin, line) || line.empty() || line == "/exit") break;
      messages.push_back({"user", line});
      std::vector<int32_t> ids = s.render(messages);
      const auto& history = gen.history();
      bool extends = !history.empty() && history.size() < ids.size() &&
                     std::equal(history.begin(), history.end(), ids.begin());
      if (extends) gen.append(std::span<const int32_t>(ids).subspan(history.size()));
      else gen.start(ids);
      StreamDecoder stream(*s.tokenizer, true);
      std::vector<int32_t> reply;
      while (auto id = gen.next()) {
        reply.push_back(*id);
        std::fputs(stream.push(*id).c_str(), stdout);
        std::fflush(stdout);
      }
      std::fputs(stream.flush().c_str(), stdout);
      std::printf("\n");
      messages.push_back({"assistant", s.tokenizer->decode(reply, true)});
    }
  }});
}

}  // namespace glm4::cli
