// Sentencepiece tokenizer (ChatGLM2/3 tokenizer.model, or one trained by sp_trainer) through
// libsentencepiece. ChatGLM2/3 put their special tokens after the sp vocabulary; a model trained by
// us carries them inside as user-defined symbols.
#include <sentencepiece_processor.h>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "io/file/json_file.h"
#include "io/tokenizer/file_io.h"
#include "io/tokenizer/sp_model_proto.h"
#include "io/tokenizer/special_tokens.h"
#include "io/tokenizer/tokenizer.h"

namespace glm4 {
namespace {

// ChatGLM2/3 tokenization_chatglm.py: ids n_pieces + i. ChatGLM2 has the first five.
const char* const kChatGlmSpecials[] = {"[MASK]",   "[gMASK]",       "[sMASK]",
                                        "sop",      "eop",           "<|system|>",
                                        "<|user|>", "<|assistant|>", "<|observation|>"};
constexpr size_t kChatGlm2SpecialCount = 5;
constexpr int kChatGlmPieceCount = 64789;

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::string where, const std::string& proto,
                         const std::vector<SpPiece>& pieces, size_t chatglm_specials)
      : where_(std::move(where)) {
    const auto status = sp_.LoadFromSerializedProto(proto);
    GLM4_CHECK(status.ok(), where_, ": not a loadable sentencepiece model: ", status.ToString());
    n_pieces_ = sp_.GetPieceSize();
    GLM4_CHECK(size_t(n_pieces_) == pieces.size(), where_, ": sentencepiece reports ", n_pieces_,
               " pieces, the file holds ", pieces.size());
    for (int32_t id = 0; id < n_pieces_; ++id) {
      const int type = pieces[id].type;
      if (type == SpPiece::kUserDefined) user_defined_.add(pieces[id].text, id, where_);
      if (type == SpPiece::kUserDefined || type == SpPiece::kControl || type == SpPiece::kUnknown) {
        inner_.add(pieces[id].text, id, where_);
      }
    }
    for (size_t i = 0; i < chatglm_specials; ++i) {
      const std::string text = kChatGlmSpecials[i];
      const int32_t id = n_pieces_ + int32_t(i);
      appended_.add(text, id, where_);
      // "sop"/"eop" are ordinary words in text; only bracketed tokens are matched literally.
      if (text.front() == '[' || text.front() == '<') literal_.add(text, id, where_);
    }
    for (int32_t id : user_defined_.ids()) literal_.add(*user_defined_.text_of(id), id, where_);
  }

  std::vector<int32_t> encode(std::string_view text, bool allow_special) const override {
    std::vector<int32_t> out;
    if (!allow_special) {
      encode_plain(text, out);
    } else {
      literal_.split(
          text, [&](std::string_view t) { encode_plain(t, out); },
          [&](int32_t id) { out.push_back(id); });
    }
    return out;
  }

  std::string decode(std::span<const int32_t> ids, bool skip_special) const override {
    std::vector<int> run;
    std::string out;
    auto flush = [&] {
      if (run.empty()) return;
      std::string piece_text;
      const auto status = sp_.Decode(run, &piece_text);
      GLM4_CHECK(status.ok(), where_, ": decode failed: ", status.ToString());
      out += piece_text;
      run.clear();
    };
    for (const int32_t id : ids) {
      GLM4_CHECK(id >= 0 && id < vocab_size(), "sentencepiece tokenizer ", where_,
                 ": cannot decode token id ", id, " (vocab size ", vocab_size(), ")");
      if (skip_special && (appended_.text_of(id) || inner_.text_of(id))) continue;
      if (id < n_pieces_) {
        run.push_back(id);
      } else {  // ChatGLM's appended specials: each run of sp pieces is decoded on its own
        flush();
        out += *appended_.text_of(id);
      }
    }
    flush();
    return out;
  }

  int32_t vocab_size() const override { return n_pieces_ + int32_t(appended_.size()); }

  std::optional<int32_t> special_id(std::string_view token) const override {
    if (auto id = appended_.id_of(token)) return id;
    return inner_.id_of(token);
  }

  std::string_view kind() const override { return "sentencepiece"; }

  // A piece's text with U+2581 as a space; byte-fallback pieces ("<0xAB>") are their byte.
  std::optional<std::string> token_bytes(int32_t id) const override {
    if (id < 0 || id >= n_pieces_ || inner_.text_of(id) || sp_.IsControl(id) || sp_.IsUnknown(id) ||
        sp_.IsUnused(id))
      return std::nullopt;
    const std::string piece = sp_.IdToPiece(id);
    if (sp_.IsByte(id)) return std::string(1, char(std::stoi(piece.substr(3, 2), nullptr, 16)));
    std::string out;
    for (size_t i = 0; i < piece.size(); ++i) {
      if (piece.compare(i, 3, "\xe2\x96\x81") == 0) {
        out += ' ';
        i += 2;
      } else {
        out += piece[i];
      }
    }
    if (out.empty()) return std::nullopt;
    return out;
  }

 private:
  void sp_encode(std::string_view text, std::vector<int32_t>& out) const {
    std::vector<int> ids;
    const auto status = sp_.Encode(text, &ids);
    GLM4_CHECK(status.ok(), where_, ": encode failed: ", status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }

  // sentencepiece always turns user-defined symbols in text into their ids; to encode such a
  // string as plain text, its first byte is encoded apart from the rest.
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const {
    if (user_defined_.empty()) return sp_encode(text, out);
    user_defined_.split(
        text, [&](std::string_view t) { sp_encode(t, out); },
        [&](int32_t id) {
          const std::string& s = *user_defined_.text_of(id);
          sp_encode(s.substr(0, 1), out);
          encode_plain(std::string_view(s).substr(1), out);
        });
  }

  std::string where_;
  sentencepiece::SentencePieceProcessor sp_;
  int32_t n_pieces_ = 0;
  SpecialTokens appended_;      // after the sp vocabulary (ChatGLM2/3)
  SpecialTokens inner_;         // control, unknown and user-defined pieces
  SpecialTokens user_defined_;  // pieces sentencepiece matches in raw text by itself
  SpecialTokens literal_;       // what allow_special matches in text
};

// How many of ChatGLM's appended specials this model has: 0 unless it is a ChatGLM tokenizer.
size_t chatglm_special_count(const std::filesystem::path& file,
                             const std::vector<SpPiece>& pieces) {
  for (const auto& p : pieces) {
    if (p.text == "[gMASK]") return 0;  // specials live inside the model
  }
  const auto config_path = file.parent_path() / "tokenizer_config.json";
  if (!std::filesystem::exists(config_path)) {
    // A bare ChatGLM tokenizer.model: assume ChatGLM3, whose specials extend ChatGLM2's.
    return pieces.size() == size_t(kChatGlmPieceCount) ? std::size(kChatGlmSpecials) : 0;
  }
  const nlohmann::json config = read_json_file(config_path);
  GLM4_CHECK(config.is_object(), config_path.string(), ": not a JSON object");
  if (config.value("tokenizer_class", "") != "ChatGLMTokenizer") return 0;
  const std::string name = config.value("name_or_path", "");
  const std::string chat_template = config.value("chat_template", "");
  const bool chatglm3 = name.find("chatglm3") != std::string::npos ||
                        chat_template.find("<|user|>") != std::string::npos;
  return chatglm3 ? std::size(kChatGlmSpecials) : kChatGlm2SpecialCount;
}

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(const std::filesystem::path& file) {
  const std::string proto = tok_io::read_file(file);
  const std::vector<SpPiece> pieces = read_sp_pieces(proto, file.string());
  // libsentencepiece builds a trie over the pieces that aborts the process (an exception it
  // cannot pass on) on an empty piece or a NUL byte in one, so those are refused here.
  for (size_t i = 0; i < pieces.size(); ++i)
    GLM4_CHECK(!pieces[i].text.empty() && pieces[i].text.find('\0') == std::string::npos,
               file.string(), ": piece ", i,
               pieces[i].text.empty() ? " is empty" : " holds a NUL byte",
               " (sentencepiece cannot load such a model)");
  return std::make_unique<SentencePieceTokenizer>(file.string(), proto, pieces,
                                                  chatglm_special_count(file, pieces));
}

}  // namespace glm4
