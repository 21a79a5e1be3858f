// The training state (HDF5, OUT/checkpoint.h5): trainable tensors, AdamW moments, step, data
// cursor, the best validation loss, the run configuration and a format version: enough that a
// resumed run continues bit-identically. Written to a temporary name, then renamed.
#pragma once
#include <filesystem>
#include <functional>
#include <limits>
#include <string>

#include "dataset/batch_iterator.h"
#include "train/adamw.h"
#include "train/train_config.h"

namespace glm4 {

// 2: string attributes are fixed-length (version 1 wrote variable-length ones, which are no longer
// read: a corrupt heap of them makes libhdf5 loop forever).
constexpr int64_t kTrainingStateVersion = 2;

struct TrainState {
  int64_t step = 0;  // optimizer steps done
  DataCursor cursor;
  double best_val_loss = std::numeric_limits<double>::infinity();
  int64_t evals_without_improvement = 0;
  // What the run read (train/run_fingerprint.h); empty in checkpoints written before they were
  // stored.
  std::string model_fingerprint, data_fingerprint;
};

// What a checkpoint says about its run without loading its tensors: for planning a --resume.
struct CheckpointSummary {
  TrainConfig config;  // the settings it was trained with
  TrainState state;    // step, cursor, best loss, fingerprints
};
CheckpointSummary read_checkpoint_summary(const std::filesystem::path& path);

// Gives parameter i's full AdamW moments (the optimizer may hold only a piece of them when it is
// sharded over data-parallel ranks); asked for every parameter, in order.
using MomentSource =
    std::function<void(size_t i, std::vector<float>* exp_avg, std::vector<float>* exp_avg_sq)>;

// Without `moments`, the optimizer's own (whole) moments are saved.
void save_training_state(const std::filesystem::path& path, const TrainConfig& config,
                         const AdamW& optimizer, const TrainState& state,
                         const MomentSource& moments = {});

// Restores parameters (in place, by name), moments (the optimizer keeps the elements it owns) and
// state; returns the saved config. The file holds whole tensors, so a run with any number of
// ranks can resume it. Throws naming the file when the parameters do not match the run's.
TrainConfig load_training_state(const std::filesystem::path& path, AdamW& optimizer,
                                TrainState* state);

}  // namespace glm4
