// config.json as load_model_config reads and validates it.
#include "fuzz/fuzz_support.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto file = glm4::fuzz::scratch_dir() / "config.json";
  glm4::fuzz::write_bytes(file, data, size);
  return glm4::fuzz::accept_rejection([&] { (void)glm4::load_model_config(file); });
}
