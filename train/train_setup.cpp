// Builds a TrainRun: model, compute, data splits, trainable parameters, reducer, optimizer and
// the state of a resumed run, in that order (the LoRA init draws from --seed).
#include "train/train_setup.h"

#include <cstdio>

#include "base/check.h"
#include "base/memory.h"
#include "base/parallel.h"
#include "dataset/records.h"
#include "dataset/text_encoder.h"
#include "model/adapter/adapter_io.h"
#include "model/config.h"
#include "train/param_sync.h"
#include "train/resume_plan.h"
#include "train/run_fingerprint.h"

namespace glm4 {

namespace {
DataFiles with_data_flag(const std::string& path) {
  try {
    return resolve_data_path(path);
  } catch (const Error& e) {
    throw Error(std::string("--data ") + path + ": " + e.what());
  }
}

LoraConfig lora_from(const TrainConfig& c) {
  LoraConfig l;
  l.rank = c.lora_rank;
  l.alpha = c.lora_alpha;
  l.dropout = c.lora_dropout;
  l.use_rslora = c.rslora;
  l.dora = c.fine_tune_type == "dora";
  l.targets = c.lora_targets;
  l.num_layers = c.num_layers;
  return l;
}

Dataset load_split(const std::string& file, const TextEncoder& enc, const TrainConfig& c,
                   int64_t vocab, ProgressBar& bar) {
  DatasetOptions o;
  o.mask_prompt = c.mask_prompt;
  o.max_seq_length = c.max_seq_length;
  o.vocab_size = vocab;
  Dataset d = load_dataset(file, enc, o);
  if (d.truncated)
    bar.message(str_cat("warning: ", d.truncated, " of ", d.examples.size(), " examples in ", file,
                        " were longer than --max-seq-length ", c.max_seq_length,
                        " and were truncated"));
  GLM4_CHECK(d.target_tokens > 0, file, ": no example has a training target");
  return d;
}

// The trainable tensors, by name: every parameter with --full, else the adapters, new (from
// --seed) or --init-adapter's (`lora` then holds that adapter's settings, read and checked before
// the model loaded).
std::vector<std::pair<std::string, Tensor>> trainable_parameters(Glm4Model& model,
                                                                 const TrainConfig& c,
                                                                 const LoraConfig& lora,
                                                                 ProgressBar& bar) {
  std::vector<std::pair<std::string, Tensor>> params;
  if (c.full) {
    model.visit([&](const std::string& name, Param& p) {
      p.make_trainable();
      params.push_back({name, p.value});
    });
    return params;
  }
  if (!c.init_adapter.empty()) {
    std::string warning;
    try {
      warning = load_adapter(model, c.init_adapter, c.model);
    } catch (const Error& e) {  // the adapter's reader does not know the flag
      throw Error("--init-adapter " + c.init_adapter + ": " + e.what());
    }
    if (!warning.empty()) bar.message("warning: " + warning);
  } else {
    try {
      check_adapter_layout(model.config, lora, c.adapter_format);
      model.add_lora(lora, c.seed);
    } catch (const Error& e) {  // a target the model has no module for: name the flag
      const std::string what = e.what();
      if (what.rfind("unknown LoRA target", 0) != 0) throw;
      throw Error("--lora-targets: " + what);
    }
  }
  return model.lora_parameters();
}

// The fingerprints of what this run reads; a resumed run must read what its checkpoint was
// trained on (checked when the checkpoint holds them: older ones do not).
TrainState fresh_state(const TrainConfig& c, const DataFiles& files) {
  TrainState state;
  state.model_fingerprint = model_fingerprint(c.model);
  state.data_fingerprint = data_fingerprint(files);
  if (c.resume.empty()) return state;
  const CheckpointSummary saved = read_checkpoint_summary(c.resume);
  check_same_run(c.resume, saved.config, c);
  const TrainState& was = saved.state;
  GLM4_CHECK(was.model_fingerprint.empty() || was.model_fingerprint == state.model_fingerprint,
             "--model ", c.model, ": the model files differ from those the run in ", c.resume,
             " was trained on (fingerprint ", state.model_fingerprint, ", the checkpoint's ",
             was.model_fingerprint,
             "); resume with the model the run began with, or start a new "
             "run with another --out");
  GLM4_CHECK(was.data_fingerprint.empty() || was.data_fingerprint == state.data_fingerprint,
             "--data ", c.data, ": the data differs from what the run in ", c.resume,
             " was trained on (fingerprint ", state.data_fingerprint, ", the checkpoint's ",
             was.data_fingerprint,
             "); a resumed run reads the same examples in the same order: "
             "resume with the data the run began with, or start a new run with another --out");
  GLM4_CHECK(was.step < c.iters, "--resume ", c.resume, ": already at step ", was.step,
             " of --iters ", c.iters, "; raise --iters above it to train further");
  return state;
}

// --resume: the saved parameters, moments, step and cursor.
void resume_from(const TrainConfig& c, AdamW& optimizer, TrainState& state) {
  if (c.resume.empty()) return;
  TrainState fingerprints = state;
  load_training_state(c.resume, optimizer, &state);
  state.model_fingerprint = fingerprints.model_fingerprint;
  state.data_fingerprint = fingerprints.data_fingerprint;
}
}  // namespace

void check_training_memory(const TrainConfig& c, int64_t trainable, int64_t available) {
  if (available < 0) return;
  const int64_t need = 3 * int64_t(sizeof(float)) * trainable;
  if (need <= available) return;
  std::string flag = "--full";
  if (!c.full) {
    flag = "--lora-targets ";
    for (size_t i = 0; i < c.lora_targets.size(); ++i) flag += (i ? "," : "") + c.lora_targets[i];
  }
  char sizes[160];
  std::snprintf(sizes, sizeof sizes,
                "%.1fM trainable parameters need %.1f GB for their gradients and AdamW moments, "
                "and %.1f GB of memory is available",
                double(trainable) / 1e6, double(need) / 1e9, double(available) / 1e9);
  fail(flag, ": ", sizes,
       c.full ? "; train LoRA adapters instead (without --full)"
              : "; adapt fewer modules (for MoE models the attention and shared_experts, not every "
                "expert: docs/training.md), or lower --lora-rank or --num-layers");
}

TrainRun set_up_training(const TrainConfig& config, Distributed& group, ProgressBar& bar) {
  TrainConfig c = config;
  c.validate();
  if (c.fine_tune_type == "full") c.full = true;
  if (c.threads > 0)
    set_max_threads(int(c.threads));
  else if (group.size() > 1)
    set_max_threads(default_rank_threads(group.local_size()));
  DataFiles files = with_data_flag(c.data);
  TrainState state = fresh_state(c, files);  // before the model loads: a refusal comes at once

  // The data as well, and --init-adapter's files: a bad record or path is named at once, not
  // after the minutes a large model takes to load.
  const ModelConfig model_config = load_model_config(c.model);
  TextEncoder encoder = make_text_encoder(c.model);
  Dataset train = load_split(files.train, encoder, c, model_config.vocab_size, bar);
  Dataset valid;
  if (!files.valid.empty())
    valid = load_split(files.valid, encoder, c, model_config.vocab_size, bar);
  LoraConfig lora = lora_from(c);
  if (!c.full && !c.init_adapter.empty()) {
    try {
      lora = read_adapter_info(c.init_adapter).lora;  // the run trains on with its settings
      check_adapter_layout(model_config, lora, c.adapter_format);
    } catch (const Error& e) {  // the adapter's reader does not know the flag
      throw Error("--init-adapter " + c.init_adapter + ": " + e.what());
    }
  }

  std::unique_ptr<Glm4Model> model;
  try {
    model = load_model(c.model, c.weights_memory());
  } catch (const Error& e) {  // the loader does not know the flag
    throw Error("--model " + c.model + ": " + e.what());
  }
  bar.message(model->loaded.describe());
  const ComputeChoice compute = apply_compute_flag(*model, c.compute);

  std::vector<std::pair<std::string, Tensor>> params = trainable_parameters(*model, c, lora, bar);
  if (group.size() == 1) {  // under mpirun the ranks own parts of the moments
    int64_t trainable = 0;
    for (const auto& [name, t] : params) trainable += t.numel();
    check_training_memory(c, trainable, available_memory_bytes());
  }
  // Data-parallel: gradients summed over the ranks; with --full each rank's optimizer owns a
  // piece of every bucket (ZeRO stage 1).
  std::unique_ptr<GradientReducer> reducer;
  std::vector<ElementRange> owned;
  std::vector<Tensor> tensors;
  for (auto& [name, t] : params) tensors.push_back(t);
  if (group.size() > 1) {
    reducer =
        std::make_unique<GradientReducer>(group, tensors, c.full, int64_t(c.bucket_mb * (1 << 20)));
    owned = reducer->owned(group.rank());
  }
  AdamW optimizer(params,
                  {.lr = c.learning_rate,
                   .beta1 = 0.9,
                   .beta2 = 0.999,
                   .eps = 1e-8,
                   .weight_decay = c.weight_decay},
                  owned);
  resume_from(c, optimizer, state);
  check_same_parameters(group, tensors, "at the start");
  return TrainRun{.config = std::move(c),
                  .model = std::move(model),
                  .compute = compute,
                  .lora = std::move(lora),
                  .train = std::move(train),
                  .valid = std::move(valid),
                  .params = std::move(params),
                  .tensors = std::move(tensors),
                  .reducer = std::move(reducer),
                  .optimizer = std::move(optimizer),
                  .state = state};
}

}  // namespace glm4
