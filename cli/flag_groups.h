// Flag groups several subcommands share, each declared once: a command's XFlags struct holds
// the groups it uses beside its own flags, and its registration calls each group's add.
// (--compute is add_compute_flag in cli_common.h.)
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "cli/model_session.h"
#include "infer/generator.h"
#include "io/tokenizer/chat_template.h"
#include "io/tokenizer/reply_parser.h"

namespace glm4::cli {

// --model DIR, required; `help` says what the command needs from the directory. Commands that
// read the weights again and again (generate, serve, ...) add --mmap / --no-mmap: how the weight
// files are held (io/file_memory.h); the others map them, since they read them once.
struct ModelFlags {
  std::string dir;
  bool mmap = false, no_mmap = false;
  CLI::Option* add(CLI::App* app, const std::string& help = "Model directory");
  void add_memory_flags(CLI::App* app);
  FileResidency memory() const;  // kAuto unless a flag says otherwise
};

// --adapter DIR: a LoRA adapter directory in the PEFT or MLX layout. `use` ends the help with
// what the command does with it (", applied live" by default).
struct AdapterFlags {
  std::string dir;
  CLI::Option* add(CLI::App* app, const std::string& use = ", applied live");
};

// --data FILE (JSONL records; `help` says which) and --batch-size N: records per forward pass,
// whose default differs per command (the help ends with it). add returns --data's option.
struct DataFlags {
  explicit DataFlags(int64_t default_batch_size) : batch_size(default_batch_size) {}
  std::string file;
  int64_t batch_size;
  CLI::Option* add(CLI::App* app, const std::string& help, const std::string& batch_help);
  void check_batch_size() const;  // > 0
};

// --kv-cache: adds the flag (generate, chat, serve) and reads its value.
void add_kv_cache_flag(CLI::App* app, std::string& value);
DType kv_cache_dtype(const std::string& value);

// What generate and chat sample with: --max-tokens, --temp, --top-k, --top-p, --min-p,
// --repeat-penalty, --seed, --max-kv-size, --kv-cache.
struct SamplingFlags {
  int max_tokens = 256;
  float temp = 0, top_p = 1, min_p = 0, repeat_penalty = 1;
  int top_k = 0;
  uint64_t seed = 0;
  int64_t max_kv_size = 0;
  std::string kv_cache = "f32";

  void add(CLI::App* app);
  // The generation settings, stopping at the session's stop ids (chat: also the template's).
  GenerationConfig config(const ModelSession& s, bool chat) const;
};

// --system, --no-thinking and --tools: how a chat conversation opens, the template's
// enable_thinking and the tools the model may call. `after_chat_flag`: the command renders the chat
// template only with --chat.
struct ChatTurnFlags {
  std::string system;
  bool no_thinking = false;
  std::string tools;  // --tools FILE: a JSON array of OpenAI tool specs (cli/reply_display.h)

  void add(CLI::App* app, bool after_chat_flag);
  std::vector<ChatMessage> opening() const;  // the system message, when there is one
  ChatOptions options() const;               // reads the --tools file
  // How replies are read: parsed (reasoning, calls) when --tools is given.
  ReplyParserOptions reply_options(ChatFormat format, const ChatOptions& options) const;
  // With tools: each call the model opens is held to its tool's schema (null without tools).
  std::shared_ptr<grammar::CallWatch> call_watch(const ModelSession& s, const ChatOptions& options,
                                                 const GenerationConfig& cfg) const;
};

}  // namespace glm4::cli
