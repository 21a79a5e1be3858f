#include "dataset/text_encoder.h"

#include <memory>
#include <mutex>

#include "base/check.h"
#include "io/tokenizer/chat_template.h"
#include "io/tokenizer/tokenizer.h"

namespace glm4 {

namespace {
struct LazyTokenizer {
  std::filesystem::path dir;
  std::once_flag once;
  std::unique_ptr<Tokenizer> tok;
  ChatFormat format = ChatFormat::Glm4;
  std::vector<int32_t> prefix;
  int32_t eos = -1;

  void load() {
    std::call_once(once, [&] {
      tok = load_tokenizer(dir);
      format = detect_chat_format(*tok, dir);
      prefix = prompt_prefix_ids(*tok);
      eos = end_of_text_id(*tok).value_or(-1);
      GLM4_CHECK(eos >= 0, dir.string(),
                 ": the tokenizer has no end-of-text token (<|endoftext|> or </s>)");
    });
  }
};
}  // namespace

TextEncoder make_text_encoder(const std::filesystem::path& model_dir) {
  auto lazy = std::make_shared<LazyTokenizer>();
  lazy->dir = model_dir;
  TextEncoder enc;
  enc.encode = [lazy](std::string_view text) {
    lazy->load();
    return lazy->tok->encode(text, false);
  };
  enc.render_chat = [lazy](const std::vector<ChatMessage>& messages, const ChatOptions& options) {
    lazy->load();
    return render_chat(*lazy->tok, lazy->format, messages, false, options);
  };
  // prefix and eos are needed before any record is read: load now if the files exist.
  bool has_tokenizer = std::filesystem::exists(model_dir / "tokenizer.json") ||
                       std::filesystem::exists(model_dir / "tokenizer.model");
  if (has_tokenizer) {
    lazy->load();
    enc.prefix_ids = lazy->prefix;
    enc.eos_id = lazy->eos;
  }
  return enc;
}

}  // namespace glm4
