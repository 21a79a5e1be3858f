// Helpers shared by the subcommands: the registry of leaf commands, parsing of flag values
// (token lists, sizes, dtypes) with errors that name the flag, and output-path checks.
#pragma once
#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/dtype.h"

namespace glm4::cli {

// A leaf subcommand: main runs `run` when `app` was the one parsed.
struct Command {
  CLI::App* app;
  std::function<void()> run;
};

// Thrown by a command that ends with a status other than 0 or 1 after saying why (train stopped
// by a signal: 128 + the signal); main exits with it.
struct ExitStatus {
  int status;
};

void add_init_command(CLI::App& parent, std::vector<Command>& out);
void add_logits_command(CLI::App& parent, std::vector<Command>& out);
void add_adapter_command(CLI::App& parent, std::vector<Command>& out);
void add_train_command(CLI::App& parent, std::vector<Command>& out);
void add_generate_command(CLI::App& parent, std::vector<Command>& out);
void add_chat_command(CLI::App& parent, std::vector<Command>& out);
void add_fuse_command(CLI::App& parent, std::vector<Command>& out);
void add_quantize_command(CLI::App& parent, std::vector<Command>& out);
void add_perplexity_command(CLI::App& parent, std::vector<Command>& out);
void add_evaluate_command(CLI::App& parent, std::vector<Command>& out);
void add_classify_command(CLI::App& parent, std::vector<Command>& out);
void add_tokenize_command(CLI::App& parent, std::vector<Command>& out);
void add_tokenizer_command(CLI::App& parent, std::vector<Command>& out);
void add_plot_command(CLI::App& parent, std::vector<Command>& out);
void add_serve_command(CLI::App& parent, std::vector<Command>& out);
void add_export_command(CLI::App& parent, std::vector<Command>& out);

// Prints `j` on standard output as one line in glm4's JSON style (io/file/json_line.h): every
// command that prints JSON prints it through this.
void print_json(const nlohmann::json& j);

// "1,2,3" (spaces allowed) -> ids; each must be in [0, vocab) when vocab > 0.
std::vector<int32_t> parse_token_list(const std::string& text, const std::string& flag,
                                      int64_t vocab = 0);
// "2GB", "500MB", "1.5GiB", "123" (bytes), "0": bytes. Decimal units are powers of 1000 and
// binary ones (KiB, MiB, GiB, TiB) powers of 1024, as transformers' max_shard_size reads them.
size_t parse_size(const std::string& text, const std::string& flag);
// --compute auto|f32|bf16 into `value` (default auto), with kComputeFlagHelp.
extern const char* const kComputeFlagHelp;
void add_compute_flag(CLI::App* app, std::string& value);
// "f32" | "bf16" | "f16".
DType parse_dtype_flag(const std::string& text, const std::string& flag);

// Runs fn; a glm4::Error it throws is rethrown naming the flag in front ("FLAG: " when the
// message names the value already, else "FLAG VALUE: ").
template <typename Fn>
auto with_flag(const std::string& flag, const std::string& value, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    std::string msg = e.what();
    throw Error(flag + (msg.find(value) == std::string::npos ? " " + value : "") + ": " + msg);
  }
}

// `path` may be written as a file: not a directory, its directory exists, and it is not a file
// already unless `force` (the refusal says to add --force).
void check_output_file(const std::filesystem::path& path, const std::string& flag, bool force);
// `dir` as --model: not a file (a model is a directory: config.json, weights, tokenizer).
// `need_config`: it exists and holds config.json.
void check_model_dir(const std::filesystem::path& dir, const std::string& flag, bool need_config);
// `path` is a file to read: it exists and is not a directory.
void check_input_file(const std::filesystem::path& path, const std::string& flag);
// `dir` is missing (and can be created: no file stands where a parent directory should be) or
// an empty directory, unless `force`. The refusal says what the directory
// holds, then `other_way` when given (another way on than --force: "; to continue it: ...").
void check_output_dir(const std::filesystem::path& dir, const std::string& flag, bool force,
                      const std::string& other_way = "");

}  // namespace glm4::cli
