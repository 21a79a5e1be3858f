// glm4 tokenize: text -> ids with the model directory's tokenizer (optionally as a chat turn);
// glm4 tokenizer train: a sentencepiece tokenizer with the GLM special tokens built in.
#include <cstdio>

#include "cli/cli_common.h"
#include "io/tokenizer/chat_template.h"
#include "io/tokenizer/sp_trainer.h"
#include "io/tokenizer/tokenizer.h"

namespace glm4::cli {

void add_tokenize_command(CLI::App& parent, std::vector<Command>& out) {
  CLI::App* app = parent.add_subcommand("tokenize", "Print the token ids of a text");
  auto model = std::make_shared<std::string>();
  auto text = std::make_shared<std::string>();
  auto chat = std::make_shared<bool>(false);
  app->add_option("--model", *model, "Model directory with tokenizer files")->required();
  app->add_option("--text", *text, "Text to encode")->required();
  app->add_flag("--chat", *chat, "Render the text as a user turn of the model's chat template");
  out.push_back({app, [model, text, chat] {
    auto tok = with_flag("--model", *model, [&] { return load_tokenizer(*model); });
    std::vector<int32_t> ids;
    if (*chat) {
      ChatFormat format = detect_chat_format(*tok);
      ids = render_chat(*tok, format, {{"user", *text}}, true).ids;
    } else {
      ids = tok->encode(*text, true);
    }
    for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? "," : "", ids[i]);
    std::printf("\n");
  }});
}

void add_tokenizer_command(CLI::App& parent, std::vector<Command>& out) {
  CLI::App* group = parent.add_subcommand("tokenizer", "Tokenizer tools");
  group->require_subcommand(1);
  CLI::App* app = group->add_subcommand("train", "Train a sentencepiece BPE tokenizer with GLM special tokens");
  auto inputs = std::make_shared<std::vector<std::string>>();
  auto vocab = std::make_shared<int>(4000);
  auto dir = std::make_shared<std::string>();
  app->add_option("--input", *inputs, "Text files, one sentence or paragraph a line")->required();
  app->add_option("--vocab-size", *vocab, "Vocabulary size (default 4000)");
  app->add_option("--out", *dir, "Directory for tokenizer.model and tokenizer_config.json")->required();
  out.push_back({app, [inputs, vocab, dir] {
    GLM4_CHECK(*vocab >= 100, "--vocab-size must be at least 100, got ", *vocab);
    std::vector<std::filesystem::path> files;
    for (const auto& f : *inputs) {
      GLM4_CHECK(std::filesystem::is_regular_file(f), "--input ", f, ": no such file");
      files.push_back(f);
    }
    train_sentencepiece(files, *vocab, *dir);
    std::fprintf(stderr, "wrote %s/tokenizer.model (vocab %d)\n", dir->c_str(), *vocab);
  }});
}

}  // namespace glm4::cli
