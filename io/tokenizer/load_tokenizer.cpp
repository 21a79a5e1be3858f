// Picks the tokenizer implementation from the files in a model directory.
#include "base/check.h"
#include "io/tokenizer/tokenizer.h"

namespace glm4 {

std::optional<std::string> Tokenizer::token_bytes(int32_t id) const {
  std::string text = decode({&id, 1}, true);
  if (text.empty()) return std::nullopt;
  return text;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& model_dir) {
  GLM4_CHECK(std::filesystem::is_directory(model_dir), "tokenizer: ", model_dir.string(),
             " is not a directory");
  const auto json_file = model_dir / "tokenizer.json";
  if (std::filesystem::exists(json_file)) return load_tokenizer_json(json_file);
  const auto model_file = model_dir / "tokenizer.model";
  if (std::filesystem::exists(model_file)) {
    if (looks_like_tiktoken(model_file)) return load_tiktoken(model_file);
    try {
      return load_sentencepiece(model_file);
    } catch (const Error& e) {
      fail(model_file.string(),
           " is neither tiktoken ranks ('<base64> <rank>' lines) nor a "
           "sentencepiece model: ",
           e.what());
    }
  }
  fail("no tokenizer in ", model_dir.string(),
       ": looked for tokenizer.json (byte-level BPE) and tokenizer.model (tiktoken ranks or "
       "sentencepiece)");
}

}  // namespace glm4
