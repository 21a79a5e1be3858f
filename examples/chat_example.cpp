// The glm4 library in a few lines: load a model directory (with an optional LoRA adapter), render
// one chat turn with the model's template, generate greedily with the KV-cached generator and
// print the answer as it streams.
//
//   chat_example MODEL_DIR "question" [ADAPTER_DIR]
#include <cstdio>
#include <exception>

#include "infer/generator.h"
#include "io/tokenizer/chat_template.h"
#include "io/tokenizer/stream_decoder.h"
#include "io/tokenizer/tokenizer.h"
#include "model/adapter/adapter_io.h"
#include "model/compute_choice.h"
#include "model/glm4_model.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL_DIR \"question\" [ADAPTER_DIR]\n", argv[0]);
    return 2;
  }
  try {
    std::unique_ptr<glm4::Glm4Model> model = glm4::load_model(argv[1]);
    if (argc > 3) glm4::load_adapter(*model, argv[3], argv[1]);  // applied live, not merged
    glm4::apply_compute_flag(*model, "auto");  // bf16 products where weights and CPU allow
    std::unique_ptr<glm4::Tokenizer> tokenizer = glm4::load_tokenizer(argv[1]);
    glm4::ChatFormat format = glm4::detect_chat_format(*tokenizer, argv[1]);

    std::vector<glm4::ChatMessage> messages{{"user", argv[2]}};
    std::vector<int32_t> prompt = glm4::render_chat(*tokenizer, format, messages, true).ids;

    glm4::GenerationConfig config;  // greedy unless config.sampling says otherwise
    config.max_tokens = 64;
    config.stop_ids = glm4::stop_ids(*tokenizer, format);
    glm4::Generator generator(*model, config);
    glm4::StreamDecoder text(*tokenizer, /*skip_special=*/true);
    glm4::ReplyText reply(glm4::reply_starts_with_newline(format));  // drops the template's "\n"

    generator.start(prompt);
    while (std::optional<int32_t> id = generator.next())
      std::fputs(reply.push(text.push(*id)).c_str(), stdout);
    std::printf("%s\n", reply.push(text.flush()).c_str());
    std::fprintf(stderr, "%lld tokens, %.0f tokens/s\n",
                 (long long)generator.stats().generated_tokens,
                 generator.stats().decode_tokens_per_second());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
