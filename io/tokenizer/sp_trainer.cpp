// sentencepiece training through SentencePieceTrainer::Train with our own sentence iterator (so
// file errors name the file and the order is fixed) and the model returned in memory (so it is
// written atomically).
#include "io/tokenizer/sp_trainer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>

#include "base/check.h"
#include "io/file/atomic_file.h"
#include "io/tokenizer/tokenizer.h"

namespace glm4 {
namespace {

constexpr const char* kSpecials[] = {"<|endoftext|>", "[MASK]",         "[gMASK]",    "[sMASK]",
                                     "<sop>",         "<eop>",          "<|system|>", "<|user|>",
                                     "<|assistant|>", "<|observation|>"};
constexpr size_t kMaxSentences = 2'000'000;
constexpr size_t kMaxSentenceBytes = 16384;  // longer lines are skipped by the trainer

class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::filesystem::path>& files) : files_(files) { Next(); }
  bool done() const override { return done_; }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override {
    if (error_.empty()) return {};
    return sentencepiece::util::Status(sentencepiece::util::StatusCode::kInternal, error_);
  }
  void Next() override {
    while (true) {
      if (count_ >= kMaxSentences) {
        done_ = true;
        return;
      }
      if (in_.is_open() && std::getline(in_, line_)) {
        if (!line_.empty() && line_.back() == '\r') line_.pop_back();
        if (line_.empty()) continue;
        ++count_;
        return;
      }
      // Errors end the iteration and are reported through status(): no exception crosses
      // sentencepiece's code.
      if (in_.is_open()) {
        if (in_.bad()) return stop(str_cat("error reading ", files_[next_file_ - 1].string()));
        in_.close();
      }
      if (next_file_ == files_.size()) {
        done_ = true;
        return;
      }
      const auto& f = files_[next_file_++];
      in_.open(f, std::ios::binary);
      if (!in_.is_open()) return stop(str_cat("cannot open input ", f.string()));
    }
  }
  size_t count() const { return count_; }
  const std::string& error() const { return error_; }

 private:
  void stop(std::string error) {
    error_ = std::move(error);
    done_ = true;
  }
  const std::vector<std::filesystem::path>& files_;
  size_t next_file_ = 0;
  std::ifstream in_;
  std::string line_;
  size_t count_ = 0;
  bool done_ = false;
  std::string error_;
};

std::string join_specials() {
  std::string s;
  for (const char* t : kSpecials) {
    if (!s.empty()) s += ',';
    s += t;
  }
  return s;
}

}  // namespace

void train_sentencepiece(const std::vector<std::filesystem::path>& inputs, int vocab_size,
                         const std::filesystem::path& out_dir) {
  GLM4_CHECK(!inputs.empty(), "tokenizer training: no input files");
  GLM4_CHECK(vocab_size > 256 + 3 + int(std::size(kSpecials)), "tokenizer training: vocab_size ",
             vocab_size, " must exceed the 256 byte pieces + <unk> <s> </s> + ",
             std::size(kSpecials), " special tokens");
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(vocab_size)},
      {"byte_fallback", "true"},
      {"character_coverage", "0.9995"},
      {"split_digits", "true"},
      {"user_defined_symbols", join_specials()},
      {"normalization_rule_name", "identity"},
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"max_sentence_length", std::to_string(kMaxSentenceBytes)},
      {"input_sentence_size", std::to_string(kMaxSentences)},
      {"shuffle_input_sentence", "false"},
      {"num_threads", "1"},
      {"minloglevel", "2"},
      {"model_prefix", ""},
  };
  sentencepiece::SetRandomGeneratorSeed(1234);
  LineIterator lines(inputs);
  GLM4_CHECK(lines.error().empty(), "tokenizer training: ", lines.error());
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
  GLM4_CHECK(lines.error().empty(), "tokenizer training: ", lines.error());
  GLM4_CHECK(status.ok(), "tokenizer training (vocab_size ", vocab_size, ", ", lines.count(),
             " lines): ", status.ToString());

  std::filesystem::create_directories(out_dir);
  write_file_atomic(out_dir / "tokenizer.model", model);

  sentencepiece::SentencePieceProcessor sp;
  GLM4_CHECK(sp.LoadFromSerializedProto(model).ok(),
             "tokenizer training: produced an unloadable model");
  nlohmann::ordered_json config;
  config["tokenizer_class"] = "Glm4SentencePiece";
  config["model_type"] = "sentencepiece-bpe";
  config["chat_format"] = "glm4";
  config["vocab_size"] = sp.GetPieceSize();
  nlohmann::ordered_json specials = nlohmann::ordered_json::object();
  for (const char* t : kSpecials) specials[t] = sp.PieceToId(t);
  config["special_tokens"] = specials;
  config["eos_token"] = "<|endoftext|>";
  config["pad_token"] = "<|endoftext|>";
  config["trainer"] = {{"vocab_size", vocab_size},       {"byte_fallback", true},
                       {"character_coverage", 0.9995},   {"split_digits", true},
                       {"normalization", "identity"},    {"add_dummy_prefix", false},
                       {"max_sentences", kMaxSentences}, {"sentences_used", lines.count()}};
  write_file_atomic(out_dir / "tokenizer_config.json", config.dump(2) + "\n");
}

}  // namespace glm4
