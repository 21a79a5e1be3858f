// glm4 generate: stream a continuation (or a chat reply) of one prompt, or of every prompt of a
// file in one batch.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "autograd/node.h"
#include "base/peak_rss.h"
#include "cli/cli_common.h"
#include "cli/flag_groups.h"
#include "cli/model_session.h"
#include "cli/reply_display.h"
#include "infer/cached_forward.h"
#include "infer/generator.h"
#include "infer/grammar/json_schema.h"
#include "io/tokenizer/stream_decoder.h"
#include "model/config.h"

namespace glm4::cli {

namespace {
struct GenerateFlags {
  ModelFlags model;
  std::string prompt, tokens, prompts_file, json_schema;
  bool chat = false, json = false;
  AdapterFlags adapter;
  SamplingFlags sampling;
  ChatTurnFlags turn;
  std::string compute = "auto";
};

std::vector<int32_t> prompt_ids(const ModelSession& s, const std::string& prompt,
                                const GenerateFlags& f) {
  if (!f.chat) return s.encode_prompt(prompt);
  std::vector<ChatMessage> messages = f.turn.opening();
  messages.push_back({"user", prompt});
  return s.render(messages, f.turn.options());
}

void print_stats(const GenerationStats& st, const WeightsLoad& loaded) {
  std::fprintf(stderr, "\n%s\n", loaded.describe().c_str());
  std::fprintf(stderr,
               "prompt: %lld tokens, %.1f tokens/s | generation: %lld tokens, %.1f tokens/s | "
               "peak memory %.0f MB\n",
               (long long)st.prompt_tokens, st.prefill_tokens_per_second(),
               (long long)st.generated_tokens, st.decode_tokens_per_second(), peak_rss_mb());
}

// --json-schema FILE compiled (infer/grammar), its errors naming the file.
grammar::JsonSchemaGrammar compile_schema_file(const std::string& file) {
  check_input_file(file, "--json-schema");
  std::ifstream in(file);
  const auto schema = nlohmann::ordered_json::parse(in, nullptr, false);  // properties in order
  GLM4_CHECK(!schema.is_discarded(), "--json-schema ", file, ": not valid JSON");
  try {
    return grammar::compile_json_schema(schema, "schema");
  } catch (const Error& e) {
    fail("--json-schema ", file, ": ", e.what());
  }
}

// --prompts-file: one prompt a line, as text or {"prompt": "..."}; blank lines skipped.
std::vector<std::string> read_prompts_file(const std::string& file) {
  check_input_file(file, "--prompts-file");
  std::ifstream in(file);
  GLM4_CHECK(in, "--prompts-file ", file, ": cannot read the file");
  std::vector<std::string> texts;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::string text = line;
    if (line[0] == '{') {
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      GLM4_CHECK(j.is_object() && j.contains("prompt") && j["prompt"].is_string(),
                 "--prompts-file ", file, ":", n, ": expected {\"prompt\": \"...\"}");
      text = j["prompt"].get<std::string>();
    }
    texts.push_back(text);
  }
  GLM4_CHECK(!texts.empty(), "--prompts-file ", file, ": no prompts");
  return texts;
}

// What of --model's tokenizer the prompt flags need.
TokenizerNeed tokenizer_need(const GenerateFlags& f) {
  if (!f.prompt.empty()) return {f.chat ? "--chat" : "--prompt", "--tokens"};
  if (!f.prompts_file.empty()) return {"--prompts-file"};
  if (!f.json_schema.empty()) return {"--json-schema"};
  return {};
}

void run_generate(const GenerateFlags& f) {
  GLM4_CHECK(!f.prompt.empty() || !f.tokens.empty() || !f.prompts_file.empty(),
             "one of --prompt, --tokens or --prompts-file is required");
  GLM4_CHECK(f.turn.tools.empty() || f.chat, "--tools needs --chat (tools are for chat replies)");
  // Every input is read and checked before the weights, which may take minutes to load.
  ModelSession s = open_without_weights(f.model.dir, f.adapter.dir, tokenizer_need(f));
  std::optional<grammar::JsonSchemaGrammar> schema;
  if (!f.json_schema.empty()) schema = compile_schema_file(f.json_schema);
  std::vector<std::string> texts;  // --prompts-file's prompts as the file gives them
  std::vector<std::vector<int32_t>> prompts;
  if (!f.prompts_file.empty()) texts = read_prompts_file(f.prompts_file);
  for (const std::string& text : texts) prompts.push_back(prompt_ids(s, text, f));
  std::vector<int32_t> prompt;
  if (!f.tokens.empty()) {
    const int64_t vocab = with_flag("--model", f.model.dir,
                                    [&] { return load_model_config(f.model.dir).vocab_size; });
    prompt = parse_token_list(f.tokens, "--tokens", vocab);
  } else if (!f.prompt.empty()) {
    prompt = prompt_ids(s, f.prompt, f);
  }
  load_weights(s, f.compute, f.model.memory());
  GenerationConfig cfg = f.sampling.config(s, f.chat);
  // A chat reply's leading "\n" (the template's, after <|assistant|>) is not part of the answer.
  const bool strip_newline = f.chat && reply_starts_with_newline(s.format);
  NoGradGuard no_grad;
  if (!prompts.empty()) {
    auto outputs = generate_batch(*s.model, prompts, cfg);
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::string text = s.tokenizer ? s.tokenizer->decode(outputs[i], true) : "";
      text = ReplyText(strip_newline).whole(text);
      if (f.json) {
        nlohmann::json line = {{"index", i},
                               {"prompt", texts[i]},
                               {"prompt_ids", prompts[i]},
                               {"ids", outputs[i]},
                               {"text", text}};
        line.update(kernel_report(s.compute).fields());
        print_json(line);
      } else {  // "[1] the prompt" then its answer, a blank line between answers
        std::printf("%s[%zu] %s\n%s\n", i ? "\n" : "", i + 1, texts[i].c_str(), text.c_str());
      }
    }
    return;
  }
  Generator gen(*s.model, cfg);
  if (schema)
    gen.set_constraint(std::make_shared<grammar::GrammarConstraint>(
        schema->grammar, std::make_shared<const grammar::TokenTrie>(*s.tokenizer), cfg.stop_ids));
  if (f.chat) gen.set_call_watch(f.turn.call_watch(s, f.turn.options(), cfg));
  gen.start(prompt);
  std::vector<int32_t> ids;
  std::unique_ptr<StreamDecoder> stream;
  if (s.tokenizer) stream = std::make_unique<StreamDecoder>(*s.tokenizer, true);
  std::string text;
  // With --tools the reply is read: reasoning, answer and calls shown apart.
  std::unique_ptr<ReplyDisplay> display;
  if (!f.turn.tools.empty() && stream)
    display = std::make_unique<ReplyDisplay>(f.turn.reply_options(s.format, f.turn.options()),
                                             f.json ? nullptr : stdout);
  ReplyText reply(strip_newline && !display);
  const std::optional<int32_t> turn =
      display ? s.tokenizer->special_id("<|assistant|>") : std::nullopt;
  while (auto id = gen.next()) {
    ids.push_back(*id);
    if (!stream) continue;
    std::string piece = reply.push(stream->push(*id));
    text += piece;
    if (display) {
      display->push(piece);
      if (id == turn) display->turn();  // a call after text, or a further call
    } else if (!f.json) {
      std::fputs(piece.c_str(), stdout);
      std::fflush(stdout);
    }
  }
  if (stream) {
    std::string rest = reply.push(stream->flush());
    text += rest;
    if (display) {
      display->push(rest);
      display->finish();
    } else if (!f.json) {
      std::fputs(rest.c_str(), stdout);
    }
  }
  GenerationStats st = gen.stats();
  if (f.json) {
    nlohmann::json line = {{"prompt_ids", prompt},
                           {"ids", ids},
                           {"text", text},
                           {"prefill_tps", st.prefill_tokens_per_second()},
                           {"decode_tps", st.decode_tokens_per_second()},
                           {"kv_cache", kv_cache_name(gen.cache().dtype())},
                           {"kv_cache_bytes", gen.cache().bytes()},
                           {"peak_rss_mb", peak_rss_mb()}};
    if (display) {  // the reply's parts (text stays the raw reply)
      const ParsedReply& r = display->reply();
      line["content"] = r.content;
      line["reasoning_content"] = r.reasoning;
      nlohmann::json calls = nlohmann::json::array();
      for (const ToolCall& c : r.calls)
        calls.push_back({{"name", c.name}, {"arguments", c.arguments}});
      line["tool_calls"] = calls;
    }
    line.update(kernel_report(s.compute).fields());
    line.update(s.model->loaded.fields());
    print_json(line);
  } else {
    std::printf("\n");
    print_stats(st, s.model->loaded);
  }
}
}  // namespace

void add_generate_command(CLI::App& parent, std::vector<Command>& out) {
  CLI::App* app = parent.add_subcommand("generate", "Generate text from a prompt");
  auto f = std::make_shared<GenerateFlags>();
  f->model.add(app);
  auto* p = app->add_option("--prompt", f->prompt, "Prompt text");
  auto* t = app->add_option("--tokens", f->tokens, "Prompt as token ids: 1,2,3");
  auto* pf = app->add_option("--prompts-file", f->prompts_file,
                             "One prompt a line (text or {\"prompt\":...}); batched; each answer "
                             "follows its number and prompt ([1] ...; --json: index, prompt)");
  auto* js = app->add_option("--json-schema", f->json_schema,
                             "Constrain the reply to JSON that follows this JSON schema (a file; "
                             "the subset of OpenAI's structured outputs)");
  js->excludes(pf);
  p->excludes(t)->excludes(pf);
  t->excludes(pf);
  app->add_flag("--chat", f->chat, "Wrap the prompt in the model's chat template");
  app->add_flag("--json", f->json,
                "Print one JSON object (ids, text, speeds) instead of streaming");
  f->adapter.add(app);
  f->sampling.add(app);
  f->turn.add(app, true);
  add_compute_flag(app, f->compute);
  f->model.add_memory_flags(app);
  out.push_back({app, [f] { run_generate(*f); }});
}

}  // namespace glm4::cli
