// model.safetensors.index.json as ModelFiles::open reads it, beside two valid shards the index
// may name (fuzz_fixtures.h).
#include "fuzz/fuzz_fixtures.h"
#include "fuzz/fuzz_support.h"
#include "io/model_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path dir = [] {
    auto d = glm4::fuzz::scratch_dir("index");
    glm4::fuzz::write_shard_fixture(d);
    return d;
  }();
  glm4::fuzz::write_bytes(dir / "model.safetensors.index.json", data, size);
  return glm4::fuzz::accept_rejection([&] {
    auto files = glm4::ModelFiles::open(dir);
    for (const auto& k : files.keys()) (void)files.at(k).nbytes;
  });
}
