// A hostile or corrupt checkpoint.h5 is refused with glm4::Error naming the file and the field:
// its 'config' attribute must be JSON (of bounded depth) and its counters must be counts.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "io/hdf5_store.h"
#include "tests/support/temp_dir.h"
#include "train/training_state.h"

namespace glm4 {
namespace {

using testing::TempDir;
using testing::throws_with;

AdamW one_param_optimizer() {
  return AdamW({{"w", Tensor::full({2, 2}, 1.0f).set_requires_grad(true)}}, {});
}

// A checkpoint as save_training_state writes it, with `edit` applied to the writer last.
void write_checkpoint(const std::filesystem::path& path, const std::string& config,
                      const std::function<void(Hdf5Writer&)>& edit = {}) {
  Hdf5Writer w(path);
  w.set_attr_i64("format_version", kTrainingStateVersion);
  w.set_attr("config", config);
  for (const char* a :
       {"step", "adam_step", "cursor_epoch", "cursor_position", "evals_without_improvement"})
    w.set_attr_i64(a, 1);
  w.set_attr("best_val_loss", "inf");
  const float v[4] = {1, 2, 3, 4};
  for (const char* group : {"params/w", "exp_avg/w", "exp_avg_sq/w"}) w.write_f32(group, {2, 2}, v);
  const int64_t steps[1] = {1};
  w.write_i64("param_steps", {1}, steps);
  if (edit) edit(w);
  w.commit();
}

TEST(TrainingStateErrors, ValidHandWrittenCheckpointLoads) {
  TempDir dir;
  write_checkpoint(dir / "ok.h5", "{}");
  AdamW opt = one_param_optimizer();
  TrainState state;
  load_training_state(dir / "ok.h5", opt, &state);
  EXPECT_EQ(state.step, 1);
  EXPECT_EQ(opt.params()[0].data()[3], 4.0f);
}

// A 'config' that is not JSON escaped as nlohmann's parse_error (seen while writing
// fuzz_training_state).
TEST(TrainingStateErrors, ConfigThatIsNotJsonNamesTheAttribute) {
  TempDir dir;
  write_checkpoint(dir / "bad.h5", "{not json");
  AdamW opt = one_param_optimizer();
  TrainState state;
  EXPECT_TRUE(throws_with([&] { load_training_state(dir / "bad.h5", opt, &state); },
                          {"bad.h5", "attribute 'config' is not valid JSON"}));
  write_checkpoint(dir / "deep.h5", std::string(100, '[') + std::string(100, ']'));
  EXPECT_TRUE(throws_with([&] { load_training_state(dir / "deep.h5", opt, &state); },
                          {"deep.h5", "attribute 'config'", "kMaxJsonDepth"}));
}

TEST(TrainingStateErrors, VersionOneCheckpointsAreRefusedWithAReason) {
  TempDir dir;
  write_checkpoint(dir / "v1.h5", "{}", [](Hdf5Writer& w) { w.set_attr_i64("format_version", 1); });
  AdamW opt = one_param_optimizer();
  TrainState state;
  EXPECT_TRUE(throws_with([&] { load_training_state(dir / "v1.h5", opt, &state); },
                          {"v1.h5", "format version 1", "variable-length strings"}));
}

TEST(TrainingStateErrors, NegativeCountersAndStepsAreRefused) {
  TempDir dir;
  AdamW opt = one_param_optimizer();
  TrainState state;
  write_checkpoint(dir / "neg.h5", "{}",
                   [](Hdf5Writer& w) { w.set_attr_i64("cursor_position", -5); });
  EXPECT_TRUE(throws_with([&] { load_training_state(dir / "neg.h5", opt, &state); },
                          {"neg.h5", "attribute 'cursor_position' is -5"}));
  write_checkpoint(dir / "steps.h5", "{}", [](Hdf5Writer& w) { w.set_attr_i64("adam_step", 0); });
  EXPECT_TRUE(throws_with([&] { load_training_state(dir / "steps.h5", opt, &state); },
                          {"steps.h5", "param_steps[0] = 1 is outside [0, adam_step = 0]"}));
}

}  // namespace
}  // namespace glm4
