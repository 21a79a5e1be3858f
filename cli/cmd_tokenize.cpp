// glm4 tokenize: text -> ids with the model directory's tokenizer (optionally as a chat turn);
// glm4 tokenizer train: a sentencepiece tokenizer with the GLM special tokens built in.
#include <cstdio>

#include "cli/cli_common.h"
#include "cli/flag_groups.h"
#include "io/tokenizer/chat_template.h"
#include "io/tokenizer/sp_trainer.h"
#include "io/tokenizer/tokenizer.h"

namespace glm4::cli {

namespace {
struct TokenizeFlags {
  ModelFlags model;
  std::string text;
  bool chat = false;
};

void run_tokenize(const TokenizeFlags& f) {
  auto tok = with_flag("--model", f.model.dir, [&] { return load_tokenizer(f.model.dir); });
  std::vector<int32_t> ids;
  if (f.chat) {
    ChatFormat format = detect_chat_format(*tok, f.model.dir);
    ids = render_chat(*tok, format, {{"user", f.text}}, true).ids;
  } else {
    ids = tok->encode(f.text, true);
  }
  for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? "," : "", ids[i]);
  std::printf("\n");
}

struct TokenizerTrainFlags {
  std::vector<std::string> inputs;
  int vocab = 4000;
  std::string out;
};

void run_tokenizer_train(const TokenizerTrainFlags& f) {
  GLM4_CHECK(f.vocab >= 100, "--vocab-size must be at least 100, got ", f.vocab);
  std::vector<std::filesystem::path> files;
  for (const auto& file : f.inputs) {
    GLM4_CHECK(std::filesystem::is_regular_file(file), "--input ", file, ": no such file");
    files.push_back(file);
  }
  train_sentencepiece(files, f.vocab, f.out);
  std::fprintf(stderr, "wrote %s/tokenizer.model (vocab %d)\n", f.out.c_str(), f.vocab);
}
}  // namespace

void add_tokenize_command(CLI::App& parent, std::vector<Command>& out) {
  CLI::App* app = parent.add_subcommand("tokenize", "Print the token ids of a text");
  auto f = std::make_shared<TokenizeFlags>();
  f->model.add(app, "Model directory with tokenizer files");
  app->add_option("--text", f->text, "Text to encode")->required();
  app->add_flag("--chat", f->chat, "Render the text as a user turn of the model's chat template");
  out.push_back({app, [f] { run_tokenize(*f); }});
}

void add_tokenizer_command(CLI::App& parent, std::vector<Command>& out) {
  CLI::App* group = parent.add_subcommand("tokenizer", "Tokenizer tools");
  group->require_subcommand(1);
  CLI::App* app =
      group->add_subcommand("train", "Train a sentencepiece BPE tokenizer with GLM special tokens");
  auto f = std::make_shared<TokenizerTrainFlags>();
  app->add_option("--input", f->inputs, "Text files, one sentence or paragraph a line")->required();
  app->add_option("--vocab-size", f->vocab, "Vocabulary size (default 4000)");
  app->add_option("--out", f->out, "Directory for tokenizer.model and tokenizer_config.json")
      ->required();
  out.push_back({app, [f] { run_tokenizer_train(*f); }});
}

}  // namespace glm4::cli
