// Chat-template rendering with the real GLM-4 (tiktoken), ChatGLM3 and ChatGLM2 tokenizers of
// tests/data (the GLM-4.5 family's and GLM-4-0414's formats with the GLM-4 one). Input: one byte
// choosing the format (and the generation prompt and thinking switch), then messages as
// role \x01 content \x01 role \x01 content ... (any bytes: unknown roles, invalid UTF-8, literal
// special tokens).
#include <memory>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "io/tokenizer/chat_template.h"

namespace {

const glm4::Tokenizer& tokenizer_for(glm4::ChatFormat format) {
  static const std::filesystem::path data = std::filesystem::path(GLM4_TEST_DATA) / "tokenizers";
  static const std::unique_ptr<glm4::Tokenizer> glm4_tok =
      glm4::load_tokenizer(data / "glm4-tiktoken");
  static const std::unique_ptr<glm4::Tokenizer> chatglm3 = glm4::load_tokenizer(data / "chatglm3");
  static const std::unique_ptr<glm4::Tokenizer> chatglm2 = glm4::load_tokenizer(data / "chatglm2");
  switch (format) {
    case glm4::ChatFormat::Glm4:
    case glm4::ChatFormat::Glm40414:
    case glm4::ChatFormat::Glm45:
    case glm4::ChatFormat::Glm47:
      return *glm4_tok;
    case glm4::ChatFormat::ChatGlm3:
      return *chatglm3;
    default:
      return *chatglm2;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto format = glm4::ChatFormat(data[0] % 6);
  glm4::ChatOptions options;
  options.enable_thinking = (data[0] & 0x40) == 0;
  const bool generation_prompt = (data[0] & 0x80) != 0;
  const std::string_view rest = glm4::fuzz::as_text(data + 1, size - 1);
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= rest.size(); ++i) {
    if (i == rest.size() || rest[i] == '\x01') {
      parts.emplace_back(rest.substr(start, i - start));
      start = i + 1;
    }
  }
  std::vector<glm4::ChatMessage> messages;
  for (size_t i = 0; i + 1 < parts.size(); i += 2) messages.push_back({parts[i], parts[i + 1]});
  const glm4::Tokenizer& tok = tokenizer_for(format);
  return glm4::fuzz::accept_rejection([&] {
    const auto chat = glm4::render_chat(tok, format, messages, generation_prompt, options);
    if (chat.ids.size() != chat.target.size()) std::abort();  // the contract render_chat states
    (void)tok.decode(chat.ids);
  });
}
