// glm4 tokenize: text (an argument or standard input) -> ids, optionally with their pieces or as
// a chat turn; ids -> text (--decode); data records as training renders them, loss marked (--data);
// glm4 tokenizer train: a sentencepiece tokenizer with the GLM special tokens built in.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cli_common.h"
#include "cli/flag_groups.h"
#include "dataset/dataset.h"
#include "dataset/records.h"
#include "dataset/text_encoder.h"
#include "io/file/json_line.h"
#include "io/tokenizer/chat_template.h"
#include "io/tokenizer/sp_trainer.h"
#include "io/tokenizer/tokenizer.h"

namespace glm4::cli {

namespace {
struct TokenizeFlags {
  ModelFlags model;
  std::string text, decode, data;
  bool text_given = false, chat = false, pieces = false, mask_prompt = false;
};

// A token's own text, JSON-quoted so that spaces, newlines and special tokens show.
std::string piece(const Tokenizer& tok, int32_t id) {
  const int32_t one[1] = {id};
  return json_line(tok.decode(one, false));
}

// Newlines and tabs as \n and \t, so that a record is one line and its whitespace shows.
std::string visible(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '\n' ? "\\n" : c == '\t' ? "\\t" : std::string(1, c);
  return out;
}

void print_ids(const Tokenizer& tok, const std::vector<int32_t>& ids,
               const std::vector<int32_t>* labels, bool pieces) {
  if (!pieces) {
    for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? "," : "", ids[i]);
    std::printf("\n");
    return;
  }
  // One token a line: id, (with --data) whether it carries loss, its piece.
  for (size_t i = 0; i < ids.size(); ++i) {
    if (labels)
      std::printf("%d\t%s\t%s\n", ids[i], i > 0 && (*labels)[i] != kIgnoreLabel ? "loss" : "-",
                  piece(tok, ids[i]).c_str());
    else
      std::printf("%d\t%s\n", ids[i], piece(tok, ids[i]).c_str());
  }
}

// Each record of --data as the model sees it in training: a header line, then the rendered text
// on one line (newlines shown as \n) with the tokens that carry loss between [[ and ]] (or, with
// --pieces, one token a line marked "loss").
void print_records(const Tokenizer& tok, const TokenizeFlags& f) {
  const std::string file =
      with_flag("--data", f.data, [&] { return resolve_data_path(f.data).train; });
  const TextEncoder encoder = make_text_encoder(f.model.dir);
  DatasetOptions o;
  o.mask_prompt = f.mask_prompt;
  for_each_record(file, [&](const Record& r, int64_t line) {
    const Example ex = make_example(r, encoder, o);
    std::printf("== %s:%lld: %zu tokens, %lld carry loss%s\n", file.c_str(), (long long)line,
                ex.ids.size(), (long long)count_targets(ex),
                f.pieces ? "" : " (between [[ and ]])");
    if (f.pieces) {
      print_ids(tok, ex.ids, &ex.labels, true);
      return;
    }
    std::string out;
    for (size_t t = 0; t < ex.ids.size();) {
      const bool loss = t > 0 && ex.labels[t] != kIgnoreLabel;
      size_t end = t;
      while (end < ex.ids.size() && (end > 0 && ex.labels[end] != kIgnoreLabel) == loss) ++end;
      const std::vector<int32_t> span(ex.ids.begin() + long(t), ex.ids.begin() + long(end));
      const std::string text = visible(tok.decode(span, false));
      out += loss ? "[[" + text + "]]" : text;
      t = end;
    }
    std::printf("%s\n", out.c_str());
  });
}

void run_tokenize(const TokenizeFlags& f) {
  auto tok = with_flag("--model", f.model.dir, [&] { return load_tokenizer(f.model.dir); });
  if (!f.data.empty()) return print_records(*tok, f);
  if (!f.decode.empty()) {
    const std::vector<int32_t> ids = parse_token_list(f.decode, "--decode");
    for (int32_t id : ids)
      GLM4_CHECK(id < tok->vocab_size(), "--decode: token id ", id,
                 " is outside the tokenizer's vocabulary of ", tok->vocab_size());
    if (f.pieces) return print_ids(*tok, ids, nullptr, true);
    std::printf("%s\n", tok->decode(ids, false).c_str());
    return;
  }
  std::string text = f.text;
  if (!f.text_given) {  // the text from standard input, without its final newline
    std::ostringstream in;
    in << std::cin.rdbuf();
    text = in.str();
    if (!text.empty() && text.back() == '\n') text.pop_back();
    if (!text.empty() && text.back() == '\r') text.pop_back();
  }
  std::vector<int32_t> ids;
  if (f.chat) {
    ChatFormat format = detect_chat_format(*tok, f.model.dir);
    ids = render_chat(*tok, format, {{"user", text}}, true).ids;
  } else {
    ids = tok->encode(text, true);
  }
  print_ids(*tok, ids, nullptr, f.pieces);
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
    check_input_file(file, "--input");
    files.push_back(file);
  }
  train_sentencepiece(files, f.vocab, f.out);
  std::fprintf(stderr, "wrote %s/tokenizer.model (vocab %d)\n", f.out.c_str(), f.vocab);
}
}  // namespace

void add_tokenize_command(CLI::App& parent, std::vector<Command>& out) {
  CLI::App* app = parent.add_subcommand(
      "tokenize", "Token ids (and pieces) of a text, the text of ids, or data records as trained");
  auto f = std::make_shared<TokenizeFlags>();
  f->model.add(app, "Model directory with tokenizer files");
  auto* text = app->add_option("--text", f->text, "Text to encode (default: standard input)");
  auto* decode = app->add_option("--decode", f->decode,
                                 "Token ids to turn into text: 1,2,3 (with --pieces: "
                                 "one token a line)");
  auto* data = app->add_option("--data", f->data,
                               "JSONL data (or a data folder: its train.jsonl): print each record "
                               "as rendered for training, the tokens that carry loss in [[ ]]");
  text->excludes(decode)->excludes(data);
  decode->excludes(data);
  app->add_flag("--chat", f->chat, "Render the text as a user turn of the model's chat template");
  app->add_flag("--pieces", f->pieces,
                "One token a line: id, (with --data) \"loss\" or \"-\", and its piece as a JSON "
                "string");
  app->add_flag("--mask-prompt", f->mask_prompt,
                "With --data: as train --mask-prompt (loss on completions and assistant turns)");
  out.push_back({app, [f, text] {
                   f->text_given = text->count() > 0;
                   run_tokenize(*f);
                 }});
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
