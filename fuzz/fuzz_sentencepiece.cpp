// A sentencepiece model (tokenizer.model of ChatGLM2/3: a protobuf) as load_sentencepiece reads
// it, then used to encode and decode.
#include "fuzz/fuzz_support.h"
#include "fuzz/tokenizer_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto file = glm4::fuzz::scratch_dir("sp") / "tokenizer.model";
  glm4::fuzz::write_bytes(file, data, size);
  return glm4::fuzz::accept_rejection(
      [&] { glm4::fuzz::exercise_tokenizer(*glm4::load_sentencepiece(file)); });
}
