// A safetensors file (header JSON, offsets, dtypes) as SafetensorsFile::open reads it; every
// tensor's bytes are then read in full, so an offset past the mapping shows.
#include "fuzz/fuzz_support.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto file = glm4::fuzz::scratch_dir() / "input.safetensors";
  glm4::fuzz::write_bytes(file, data, size);
  return glm4::fuzz::accept_rejection([&] {
    auto f = glm4::SafetensorsFile::open(file);
    unsigned sum = 0;
    for (const auto& t : f->tensors()) {
      for (size_t i = 0; i < t.nbytes; ++i) sum += unsigned(t.data[i]);
      if (t.dtype == "F32" || t.dtype == "BF16" || t.dtype == "F16") (void)glm4::read_f32(t);
    }
    volatile unsigned sink = sum;
    (void)sink;
  });
}
