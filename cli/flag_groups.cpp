// The shared flag groups' declarations and checks.
#include "cli/flag_groups.h"

#include <cmath>

#include "base/check.h"
#include "cli/cli_common.h"
#include "cli/reply_display.h"
#include "infer/cached_forward.h"
#include "infer/grammar/tool_call.h"

namespace glm4::cli {

CLI::Option* ModelFlags::add(CLI::App* app, const std::string& help) {
  return app->add_option("--model", dir, help)
      ->required()
      ->check(CLI::Validator(
          [](std::string& value) {
            try {
              check_model_dir(value, "--model", false);
            } catch (const Error& e) {
              return std::string(e.what()).substr(std::string("--model ").size());
            }
            return std::string();
          },
          ""));
}

void ModelFlags::add_memory_flags(CLI::App* app) {
  CLI::Option* on = app->add_flag(
      "--mmap", mmap,
      "Map the weight files (pages come and go with the page cache: for machines short of "
      "memory) instead of reading them into 2 MB pages");
  app->add_flag("--no-mmap", no_mmap,
                "Read the weight files into 2 MB pages even when they exceed the memory "
                "available (default: read them when they fit, else map them)")
      ->excludes(on);
}

FileResidency ModelFlags::memory() const {
  if (mmap) return FileResidency::kMapped;
  if (no_mmap) return FileResidency::kHugePages;
  return FileResidency::kAuto;
}

CLI::Option* AdapterFlags::add(CLI::App* app, const std::string& use) {
  return app->add_option("--adapter", dir, "LoRA adapter directory (PEFT or MLX)" + use);
}

CLI::Option* DataFlags::add(CLI::App* app, const std::string& help, const std::string& batch_help) {
  CLI::Option* data = app->add_option("--data", file, help);
  app->add_option("--batch-size", batch_size,
                  batch_help + " (default " + std::to_string(batch_size) + ")");
  return data;
}

void DataFlags::check_batch_size() const {
  GLM4_CHECK(batch_size > 0, "--batch-size must be positive, got ", batch_size);
}

void add_kv_cache_flag(CLI::App* app, std::string& value) {
  app->add_option("--kv-cache", value,
                  "What the KV cache holds: f32 (default, exact) or bf16 (half the memory and "
                  "the bytes a decode step reads)");
}

DType kv_cache_dtype(const std::string& value) {
  DType dtype;
  GLM4_CHECK(parse_kv_cache_name(value, &dtype), "--kv-cache: f32 or bf16, got \"", value, "\"");
  return dtype;
}

void SamplingFlags::add(CLI::App* app) {
  app->add_option("--max-tokens", max_tokens, "Tokens to generate at most (default 256)");
  app->add_option("--temp,--temperature", temp,  // mlx-lm's and llama.cpp's name, and OpenAI's
                  "Sampling temperature; 0 = greedy (default 0)");
  app->add_option("--top-k", top_k, "Keep the K most likely tokens; 0 = off");
  app->add_option("--top-p", top_p, "Nucleus sampling threshold (default 1 = off)");
  app->add_option("--min-p", min_p, "Drop tokens below min-p times the top probability");
  app->add_option("--repeat-penalty", repeat_penalty,
                  "Penalty for tokens of the last 64 (default 1)");
  app->add_option("--seed", seed, "Sampling seed (default 0)");
  app->add_option("--max-kv-size", max_kv_size,
                  "Keep at most N cached tokens (first 4 + most recent)");
  add_kv_cache_flag(app, kv_cache);
}

GenerationConfig SamplingFlags::config(const ModelSession& s, bool chat) const {
  // Checked here by flag name; the sampler's own checks ("[sampler] ...") guard the library.
  GLM4_CHECK(max_tokens >= 0, "--max-tokens: must be >= 0, got ", max_tokens);
  GLM4_CHECK(std::isfinite(temp) && temp >= 0, "--temp: must be >= 0, got ", temp);
  GLM4_CHECK(top_k >= 0, "--top-k: must be >= 0, got ", top_k);
  GLM4_CHECK(top_p > 0 && top_p <= 1, "--top-p: must be in (0, 1], got ", top_p);
  GLM4_CHECK(min_p >= 0 && min_p <= 1, "--min-p: must be in [0, 1], got ", min_p);
  GLM4_CHECK(std::isfinite(repeat_penalty) && repeat_penalty > 0,
             "--repeat-penalty: must be > 0, got ", repeat_penalty);
  GenerationConfig g;
  GLM4_CHECK(max_kv_size == 0 || max_kv_size > g.keep_first,
             "--max-kv-size: must be 0 (no limit) or more than the ", g.keep_first,
             " first tokens it always keeps, got ", max_kv_size);
  g.max_tokens = max_tokens;
  g.sampling.temperature = temp;
  g.sampling.top_k = top_k;
  g.sampling.top_p = top_p;
  g.sampling.min_p = min_p;
  g.sampling.repeat_penalty = repeat_penalty;
  g.sampling.seed = seed;
  g.max_kv_size = max_kv_size;
  g.kv_cache_dtype = kv_cache_dtype(kv_cache);
  g.stop_ids = s.stop_ids(chat);
  if (s.tokenizer) g.drawable_ids = s.tokenizer->vocab_size();
  validate_generation_config(g);
  return g;
}

void ChatTurnFlags::add(CLI::App* app, bool after_chat_flag) {
  const std::string with_chat = after_chat_flag ? " (with --chat)" : "";
  app->add_option("--system", system, "System message" + with_chat);
  app->add_flag("--no-thinking", no_thinking,
                "The template's enable_thinking=false (GLM-4.5 family: answer without a <think> "
                "block)" +
                    with_chat);
  app->add_option("--tools", tools,
                  "A JSON file: an array of OpenAI tool specs the model may call (replies then "
                  "show [thinking] and [tool call] parts apart)" +
                      with_chat);
}

std::vector<ChatMessage> ChatTurnFlags::opening() const {
  if (system.empty()) return {};
  return {{"system", system}};
}

ChatOptions ChatTurnFlags::options() const {
  ChatOptions o;
  o.enable_thinking = !no_thinking;
  if (!tools.empty()) o.tools = read_tools_file(tools);
  return o;
}

ReplyParserOptions ChatTurnFlags::reply_options(ChatFormat format,
                                                const ChatOptions& options) const {
  ReplyParserOptions r;
  r.format = format;
  r.enable_thinking = options.enable_thinking;
  r.tools = options.tools;
  return r;
}

std::shared_ptr<grammar::CallWatch> ChatTurnFlags::call_watch(const ModelSession& s,
                                                              const ChatOptions& options,
                                                              const GenerationConfig& cfg) const {
  if (options.tools.empty() || !s.tokenizer) return nullptr;
  return std::make_shared<grammar::CallWatch>(
      grammar::tool_call_grammar(s.format, options.tools, ""),
      std::make_shared<const grammar::TokenTrie>(*s.tokenizer), cfg.stop_ids,
      grammar::call_opening(s.format, *s.tokenizer));
}

}  // namespace glm4::cli
