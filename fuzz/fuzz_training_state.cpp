// The training state (checkpoint.h5, HDF5) as load_training_state reads it for --resume, into
// the two parameters of fuzz_fixtures.h.
#include "fuzz/fuzz_fixtures.h"
#include "fuzz/fuzz_support.h"
#include "train/training_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto file = glm4::fuzz::scratch_dir() / "checkpoint.h5";
  glm4::fuzz::write_bytes(file, data, size);
  return glm4::fuzz::accept_rejection([&] {
    glm4::AdamW optimizer(glm4::fuzz::training_params(), {});
    glm4::TrainState state;
    (void)glm4::load_training_state(file, optimizer, &state);
  });
}
