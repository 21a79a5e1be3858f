#include "train/training_state.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/check.h"
#include "io/file/json_depth.h"
#include "io/hdf5_store.h"

namespace glm4 {

namespace {
std::string exact(double v) {  // round-trips every double, inf included
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}
}  // namespace

void save_training_state(const std::filesystem::path& path, const TrainConfig& config,
                         const AdamW& optimizer, const TrainState& state,
                         const MomentSource& moments) {
  Hdf5Writer w(path);
  w.set_attr_i64("format_version", kTrainingStateVersion);
  w.set_attr("config", to_json(config).dump());
  w.set_attr_i64("step", state.step);
  w.set_attr_i64("adam_step", optimizer.step_count());
  w.set_attr_i64("cursor_epoch", state.cursor.epoch);
  w.set_attr_i64("cursor_position", state.cursor.position);
  w.set_attr_i64("evals_without_improvement", state.evals_without_improvement);
  w.set_attr("best_val_loss", exact(state.best_val_loss));
  if (!state.model_fingerprint.empty()) w.set_attr("model_fingerprint", state.model_fingerprint);
  if (!state.data_fingerprint.empty()) w.set_attr("data_fingerprint", state.data_fingerprint);
  const auto& names = optimizer.names();
  for (size_t i = 0; i < names.size(); ++i) {
    const Tensor& p = optimizer.params()[i];
    std::vector<int64_t> shape(p.shape().begin(), p.shape().end());
    w.write_f32("params/" + names[i], shape, p.data());
    if (!moments) {
      w.write_f32("exp_avg/" + names[i], shape, optimizer.exp_avg()[i].data());
      w.write_f32("exp_avg_sq/" + names[i], shape, optimizer.exp_avg_sq()[i].data());
      continue;
    }
    std::vector<float> m, v;
    moments(i, &m, &v);
    GLM4_CHECK(int64_t(m.size()) == p.numel() && int64_t(v.size()) == p.numel(), path.string(),
               ": the moments of ", names[i], " have ", m.size(), " elements, the tensor ",
               p.numel());
    w.write_f32("exp_avg/" + names[i], shape, m.data());
    w.write_f32("exp_avg_sq/" + names[i], shape, v.data());
  }
  w.write_i64("param_steps", {int64_t(names.size())}, optimizer.param_steps().data());
  w.commit();
}

namespace {
// The format check, the stored settings and the counters: everything but the tensors.
CheckpointSummary read_summary(const Hdf5Reader& r, const std::filesystem::path& path) {
  GLM4_CHECK(r.has_attr("format_version"), path.string(),
             ": not a glm4 training checkpoint (no format_version)");
  const int64_t version = r.attr_i64("format_version");
  GLM4_CHECK(
      version != 1, path.string(),
      ": a training checkpoint of format version 1 (written by an older "
      "glm4 with variable-length strings, which this one does not read); start the run again or "
      "resume it with the glm4 that wrote it");
  GLM4_CHECK(version == kTrainingStateVersion, path.string(),
             ": not a glm4 training checkpoint of format version ", kTrainingStateVersion,
             " (it says ", version, ")");
  CheckpointSummary out;
  nlohmann::json config;
  try {
    const std::string text = r.attr("config");
    check_json_depth(text, path.string() + ": attribute 'config'");
    config = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path.string(), ": attribute 'config' is not valid JSON: ", e.what());
  }
  apply_json(out.config, config, path.string());
  auto counter = [&](const char* name) {  // a count the run keeps: never negative
    const int64_t v = r.attr_i64(name);
    GLM4_CHECK(v >= 0, path.string(), ": attribute '", name, "' is ", v, ", expected a count >= 0");
    return v;
  };
  TrainState& state = out.state;
  state.step = counter("step");
  state.cursor = {counter("cursor_epoch"), counter("cursor_position")};
  state.evals_without_improvement = counter("evals_without_improvement");
  state.best_val_loss = std::strtod(r.attr("best_val_loss").c_str(), nullptr);
  if (r.has_attr("model_fingerprint")) state.model_fingerprint = r.attr("model_fingerprint");
  if (r.has_attr("data_fingerprint")) state.data_fingerprint = r.attr("data_fingerprint");
  return out;
}
}  // namespace

CheckpointSummary read_checkpoint_summary(const std::filesystem::path& path) {
  Hdf5Reader r(path);
  return read_summary(r, path);
}

TrainConfig load_training_state(const std::filesystem::path& path, AdamW& optimizer,
                                TrainState* state) {
  Hdf5Reader r(path);
  CheckpointSummary summary = read_summary(r, path);
  const auto& names = optimizer.names();
  std::vector<Tensor> m, v;
  for (size_t i = 0; i < names.size(); ++i) {
    Tensor p = optimizer.params()[i];
    std::string key = "params/" + names[i];
    GLM4_CHECK(r.has(key), path.string(), ": has no tensor ", names[i],
               " (the checkpoint was made with other LoRA targets, layers or model)");
    std::vector<int64_t> shape = r.shape(key);
    GLM4_CHECK(Shape(shape.begin(), shape.end()) == p.shape(), path.string(), ": tensor ", names[i],
               " has shape ", shape_str(Shape(shape.begin(), shape.end())), ", the run expects ",
               shape_str(p.shape()));
    std::vector<float> values = r.read_f32(key);
    std::memcpy(p.data(), values.data(), values.size() * 4);
    m.push_back(Tensor::from(p.shape(), r.read_f32("exp_avg/" + names[i])));
    v.push_back(Tensor::from(p.shape(), r.read_f32("exp_avg_sq/" + names[i])));
  }
  std::vector<int64_t> param_steps = r.read_i64("param_steps");
  GLM4_CHECK(param_steps.size() == names.size(), path.string(), ": holds ", param_steps.size(),
             " parameters, the run has ", names.size());
  const int64_t adam_step = r.attr_i64("adam_step");
  GLM4_CHECK(adam_step >= 0, path.string(), ": attribute 'adam_step' is ", adam_step,
             ", expected a count >= 0");
  for (size_t i = 0; i < param_steps.size(); ++i) {
    GLM4_CHECK(param_steps[i] >= 0 && param_steps[i] <= adam_step, path.string(), ": param_steps[",
               i, "] = ", param_steps[i], " is outside [0, adam_step = ", adam_step, "]");
  }
  optimizer.load_state(adam_step, m, v, param_steps);
  *state = summary.state;
  return summary.config;
}

}  // namespace glm4
