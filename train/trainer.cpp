#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "base/check.h"
#include "autograd/node.h"
#include "base/parallel.h"
#include "model/compute_choice.h"
#include "model/glm4_model.h"
#include "model/save.h"
#include "model/adapter/adapter_io.h"
#include "dataset/records.h"
#include "train/lr_schedule.h"
#include "infer/score.h"
#include "io/progress.h"
#include "dataset/text_encoder.h"
#include "train/training_state.h"
#include "train/train_step.h"

namespace fs = std::filesystem;

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
  l.targets = c.lora_targets;
  l.num_layers = c.num_layers;
  return l;
}

// Token-weighted validation loss over the first --val-batches batches (-1: all).
double validation_loss(const Glm4Model& model, const std::vector<Example>& examples, const TrainConfig& c) {
  return score_loss(model, examples, c.batch_size, c.val_batches > 0 ? c.val_batches : 0).loss;
}

// The temporary files (`*.tmp`, io/atomic_file.h) a killed run left in OUT and OUT/best: a save
// that never finished. The files they were to replace are whole.
void remove_stale_temporaries(const fs::path& out) {
  for (const fs::path& dir : {out, out / "best"}) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.is_regular_file() && e.path().extension() == ".tmp") fs::remove(e.path(), ec);
  }
}

Dataset load_split(const std::string& file, const TextEncoder& enc, const TrainConfig& c, int64_t vocab,
                   ProgressBar& bar) {
  DatasetOptions o;
  o.mask_prompt = c.mask_prompt;
  o.max_seq_length = c.max_seq_length;
  o.vocab_size = vocab;
  Dataset d = load_dataset(file, enc, o);
  if (d.truncated)
    bar.message(str_cat("warning: ", d.truncated, " of ", d.examples.size(), " examples in ", file,
                        " were longer than --max-seq-length ", c.max_seq_length, " and were truncated"));
  GLM4_CHECK(d.target_tokens > 0, file, ": no example has a training target");
  return d;
}
}  // namespace

TrainSummary run_training(const TrainConfig& config) {
  TrainConfig c = config;
  c.validate();
  if (c.threads > 0) set_max_threads(int(c.threads));
  DataFiles files = with_data_flag(c.data);
  ProgressBar bar(0, c.iters, c.steps_per_report);

  std::unique_ptr<Glm4Model> model = load_model(c.model);
  const ComputeChoice compute = apply_compute_flag(*model, c.compute);
  TextEncoder encoder = make_text_encoder(c.model);
  Dataset train = load_split(files.train, encoder, c, model->config.vocab_size, bar);
  Dataset valid;
  if (!files.valid.empty()) valid = load_split(files.valid, encoder, c, model->config.vocab_size, bar);

  // Trainable tensors, by name.
  std::vector<std::pair<std::string, Tensor>> params;
  LoraConfig lora = lora_from(c);
  if (c.full) {
    model->visit([&](const std::string& name, Param& p) {
      p.make_trainable();
      params.push_back({name, p.value});
    });
  } else {
    if (!c.init_adapter.empty()) {
      lora = read_adapter_info(c.init_adapter).lora;
      std::string warning = load_adapter(*model, c.init_adapter, c.model);
      if (!warning.empty()) bar.message("warning: " + warning);
    } else {
      model->add_lora(lora, c.seed);
    }
    params = model->lora_parameters();
  }
  AdamW optimizer(params, {.lr = c.learning_rate, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                           .weight_decay = c.weight_decay});

  TrainState state;
  if (!c.resume.empty()) {
    TrainConfig saved = load_training_state(c.resume, optimizer, &state);
    if (saved.seed != c.seed || saved.batch_size != c.batch_size || saved.pack != c.pack ||
        saved.max_seq_length != c.max_seq_length || saved.grad_accum != c.grad_accum)
      bar.message(str_cat("warning: --resume ", c.resume, " was written by a run with other --seed, --batch-size, ",
                          "--pack, --max-seq-length or --grad-accum; the data order will differ"));
    GLM4_CHECK(state.step < c.iters, "--resume ", c.resume, ": already at step ", state.step,
               "; raise --iters above it to train further");
  }
  fs::create_directories(c.out);
  remove_stale_temporaries(c.out);
  MetricsLog metrics(fs::path(c.out) / "metrics.jsonl", !c.resume.empty(), state.step);
  metrics.write({{"step", state.step}, {"compute", compute_dtype_name(compute.dtype)}, {"kernel", compute.kernel},
                 {"threads", max_threads()}});

  BatchOptions bo;
  bo.batch_size = c.batch_size;
  bo.max_seq_length = c.max_seq_length;
  bo.pack = c.pack;
  bo.seed = c.seed;
  bo.drop_last = int64_t(train.examples.size()) >= c.batch_size;
  BatchIterator batches(train.examples, bo);
  batches.set_cursor(state.cursor);

  LrSchedule schedule{c.lr_schedule, c.learning_rate, c.warmup, c.iters, c.min_lr};
  schedule.validate();
  auto save_all = [&](const fs::path& dir) {
    if (c.full) {
      save_model(*model, model->config, dir, model->config.torch_dtype, 0);
      copy_model_companions(c.model, dir, model->config);
    } else save_adapter(*model, lora, dir, c.adapter_format, c.model);
  };

  TrainSummary summary;
  if (!valid.examples.empty() && state.step == 0) {
    double v = validation_loss(*model, valid.examples, c);
    summary.first_val_loss = v;
    metrics.write({{"step", 0}, {"val_loss", v}});
    bar.message(str_cat("step 0: val loss ", v));
  }
  summary.best_val_loss = std::isfinite(state.best_val_loss) ? state.best_val_loss : -1;

  bar = ProgressBar(state.step, c.iters, c.steps_per_report);
  for (int64_t step = state.step; step < c.iters; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<Batch> micro;
    for (int64_t i = 0; i < c.grad_accum; ++i) micro.push_back(batches.next());
    StepOptions so;
    so.lr = schedule.at(step);
    so.max_grad_norm = c.grad_clip;
    so.recompute_layers = c.grad_checkpoint;
    so.dropout_seed = c.seed * 1000003ull + uint64_t(step);
    StepResult r = train_step(*model, optimizer, micro, so);
    GLM4_CHECK(r.finite, "step ", step + 1, ": the loss or gradient norm is not finite (loss ", r.loss,
               ", gradient norm ", r.grad_norm, "); stopping. The last saved adapter and checkpoint in ",
               c.out, " are intact; try a lower --learning-rate or --grad-clip");
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double tps = double(r.tokens) / std::max(seconds, 1e-9);
    metrics.write({{"step", step + 1}, {"loss", r.loss}, {"lr", so.lr}, {"grad_norm", r.grad_norm},
                   {"tokens", r.tokens}, {"tokens_per_s", tps}, {"peak_rss_mb", peak_rss_mb()}});
    bar.update(step, r.loss, so.lr, tps);
    summary.last_loss = r.loss;
    state.step = step + 1;
    state.cursor = batches.cursor();

    bool last = state.step == c.iters;
    if (!valid.examples.empty() && (state.step % c.steps_per_eval == 0 || last)) {
      double v = validation_loss(*model, valid.examples, c);
      metrics.write({{"step", state.step}, {"val_loss", v}});
      bar.message(str_cat("step ", state.step, ": val loss ", v));
      if (v < state.best_val_loss) {
        state.best_val_loss = v;
        state.evals_without_improvement = 0;
        save_all(fs::path(c.out) / "best");
      } else {
        ++state.evals_without_improvement;
      }
      summary.best_val_loss = state.best_val_loss;
      if (c.patience > 0 && state.evals_without_improvement >= c.patience) {
        bar.message(str_cat("early stop: no improvement in ", c.patience, " evaluations"));
        summary.stopped_early = true;
        last = true;
      }
    }
    if (state.step % c.save_every == 0 || last) {
      save_all(c.out);
      save_training_state(fs::path(c.out) / "checkpoint.h5", c, optimizer, state);
    }
    if (last) break;
  }
  bar.finish();
  summary.steps = state.step;
  return summary;
}

}  // namespace glm4
