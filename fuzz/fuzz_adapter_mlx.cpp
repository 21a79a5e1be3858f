// mlx-lm adapter_config.json (beside a valid adapters.safetensors).
#include "fuzz/adapter_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return glm4::fuzz::read_fuzzed_adapter("mlx", data, size);
}
