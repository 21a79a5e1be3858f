// A GGUF file (header, metadata of every type, nested arrays, tensor infos) as GgufFile::open
// reads it; small tensors are then decoded.
#include "fuzz/fuzz_support.h"
#include "tests/support/gguf_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto file = glm4::fuzz::scratch_dir() / "input.gguf";
  glm4::fuzz::write_bytes(file, data, size);
  return glm4::fuzz::accept_rejection([&] {
    auto f = glm4::GgufFile::open(file);
    for (const auto& [key, value] : f->kvs()) (void)value.describe();
    for (const auto& t : f->tensors()) {
      if (t.numel() <= (1 << 16)) (void)t.to_f32();
    }
  });
}
