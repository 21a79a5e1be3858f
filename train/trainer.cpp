#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

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
#include "base/peak_rss.h"
#include "base/progress_bar.h"
#include "train/metrics_log.h"
#include "dataset/text_encoder.h"
#include "dataset/step_split.h"
#include "train/distributed.h"
#include "train/fault_injection.h"
#include "train/grad_reducer.h"
#include "train/param_sync.h"
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
  l.dora = c.fine_tune_type == "dora";
  l.targets = c.lora_targets;
  l.num_layers = c.num_layers;
  return l;
}

// Token-weighted validation loss over the first --val-batches batches (-1: all). Rank r scores
// batches r, r + N, ...; the totals are added in batch order, so the value is one process's.
double validation_loss(const Glm4Model& model, const std::vector<Example>& examples, const TrainConfig& c,
                       Distributed& group) {
  const int64_t n = int64_t(examples.size()), bs = c.batch_size, limit = c.val_batches > 0 ? c.val_batches : 0;
  const int64_t batches = limit > 0 ? std::min((n + bs - 1) / bs, limit) : (n + bs - 1) / bs;
  std::vector<double> mine(size_t(2 * batches), 0.0);  // total, tokens per batch
  for (const BatchScore& b : score_batches(model, examples, bs, limit, group.rank(), group.size())) {
    mine[size_t(2 * b.index)] = b.total;
    mine[size_t(2 * b.index + 1)] = double(b.tokens);
  }
  std::vector<std::vector<double>> all = group.allgather(mine);
  double total = 0, tokens = 0;
  for (int64_t k = 0; k < batches; ++k) {
    const std::vector<double>& from = all[size_t(k % group.size())];
    total += from[size_t(2 * k)];
    tokens += from[size_t(2 * k + 1)];
  }
  return tokens > 0 ? total / tokens : NAN;
}

// This rank's micro-batches of the next step: the step's --grad-accum batches from the global
// cursor, split over the ranks by rank_rows. Sets the step-wide index of the first one.
std::vector<Batch> next_micro_batches(BatchIterator& batches, const std::vector<Example>& examples,
                                      const TrainConfig& c, const Distributed& group, int64_t* first_micro) {
  std::vector<std::vector<std::vector<int64_t>>> step;
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < c.grad_accum; ++i) {
    step.push_back(batches.next_rows());
    rows.push_back(int64_t(step.back().size()));
  }
  std::vector<Batch> micro;
  std::vector<RowSlice> mine = rank_rows(rows, group.rank(), group.size());
  for (const RowSlice& s : mine) {
    const auto& batch = step[size_t(s.batch)];
    std::vector<std::vector<int64_t>> part(batch.begin() + s.begin, batch.begin() + s.end);
    micro.push_back(make_batch(examples, part, c.pack, 0));
  }
  *first_micro = mine.empty() ? 0 : mine[0].batch;
  return micro;
}

// The temporary files (`*.tmp`, io/file/atomic_file.h) a killed run left in OUT and OUT/best: a save
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

TrainSummary train(const TrainConfig& config, Distributed& group) {
  TrainConfig c = config;
  c.validate();
  if (c.fine_tune_type == "full") c.full = true;
  if (c.threads > 0) set_max_threads(int(c.threads));
  else if (group.size() > 1) set_max_threads(default_rank_threads(group.local_size()));
  const bool root = group.root();
  DataFiles files = with_data_flag(c.data);
  ProgressBar bar(0, c.iters, c.steps_per_report, !root);

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
      check_adapter_layout(model->config, lora, c.adapter_format);
      std::string warning = load_adapter(*model, c.init_adapter, c.model);
      if (!warning.empty()) bar.message("warning: " + warning);
    } else {
      check_adapter_layout(model->config, lora, c.adapter_format);
      model->add_lora(lora, c.seed);
    }
    params = model->lora_parameters();
  }
  // Data-parallel: gradients summed over the ranks; with --full each rank's optimizer owns a
  // piece of every bucket (ZeRO stage 1).
  std::unique_ptr<GradientReducer> reducer;
  std::vector<ElementRange> owned;
  std::vector<Tensor> tensors;
  for (auto& [name, t] : params) tensors.push_back(t);
  if (group.size() > 1) {
    reducer = std::make_unique<GradientReducer>(group, tensors, c.full, int64_t(c.bucket_mb * (1 << 20)));
    owned = reducer->owned(group.rank());
  }
  AdamW optimizer(params, {.lr = c.learning_rate, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                           .weight_decay = c.weight_decay}, owned);

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
  check_same_parameters(group, tensors, "at the start");
  std::optional<MetricsLog> metrics;  // rank 0 alone writes
  if (root) {
    fs::create_directories(c.out);
    remove_stale_temporaries(c.out);
    metrics.emplace(fs::path(c.out) / "metrics.jsonl", !c.resume.empty(), state.step);
  }
  auto log = [&](const nlohmann::json& line) {
    if (metrics) metrics->write(line);
  };
  nlohmann::json setup = {{"step", state.step}, {"threads", max_threads()}, {"ranks", group.size()}};
  setup.update(compute.fields());
  log(setup);

  BatchOptions bo;
  bo.batch_size = c.batch_size;
  bo.max_seq_length = c.max_seq_length;
  bo.pack = c.pack;
  bo.seed = c.seed;
  bo.drop_last = int64_t(train.examples.size()) >= c.batch_size;
  BatchIterator batches(train.examples, bo);  // every rank walks the global cursor
  batches.set_cursor(state.cursor);

  LrSchedule schedule{c.lr_schedule, c.learning_rate, c.warmup, c.iters, c.min_lr};
  schedule.validate();
  auto save_all = [&](const fs::path& dir) {
    if (!root) return;
    if (c.full) {
      save_model(*model, model->config, dir, model->config.torch_dtype, 0);
      copy_model_companions(c.model, dir, model->config);
    } else save_adapter(*model, lora, dir, c.adapter_format, c.model);
  };

  auto save_state = [&] {
    const fs::path file = fs::path(c.out) / "checkpoint.h5";
    if (!reducer) return save_training_state(file, c, optimizer, state);
    MomentSource gather = [&](size_t i, std::vector<float>* m, std::vector<float>* v) {
      reducer->gather_moments(optimizer, i, m, v);
    };
    if (root) return save_training_state(file, c, optimizer, state, gather);
    std::vector<float> m, v;
    for (size_t i = 0; i < tensors.size(); ++i) gather(i, &m, &v);  // rank 0 asks in this order
  };

  TrainSummary summary;
  summary.rank = group.rank();
  if (!valid.examples.empty() && state.step == 0) {
    double v = validation_loss(*model, valid.examples, c, group);
    summary.first_val_loss = v;
    log({{"step", 0}, {"val_loss", v}});
    bar.message(str_cat("step 0: val loss ", v));
  }
  summary.best_val_loss = std::isfinite(state.best_val_loss) ? state.best_val_loss : -1;

  bar = ProgressBar(state.step, c.iters, c.steps_per_report, !root);
  for (int64_t step = state.step; step < c.iters; ++step) {
    inject_fault(group.rank(), step + 1, tensors);
    auto t0 = std::chrono::steady_clock::now();
    StepOptions so;
    std::vector<Batch> micro = next_micro_batches(batches, train.examples, c, group, &so.first_micro);
    so.lr = schedule.at(step);
    so.max_grad_norm = c.grad_clip;
    so.recompute_layers = c.grad_checkpoint;
    so.dropout_seed = c.seed * 1000003ull + uint64_t(step);
    StepResult r = train_step(*model, optimizer, micro, so, reducer.get());
    GLM4_CHECK(r.finite, "step ", step + 1, ": the loss or gradient norm is not finite (loss ", r.loss,
               ", gradient norm ", r.grad_norm, "); stopping. The last saved adapter and checkpoint in ",
               c.out, " are intact; try a lower --learning-rate or --grad-clip");
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double tps = double(r.tokens) / std::max(seconds, 1e-9);
    nlohmann::json line{{"step", step + 1}, {"loss", r.loss}, {"lr", so.lr}, {"grad_norm", r.grad_norm},
                        {"tokens", r.tokens}, {"tokens_per_s", tps}, {"peak_rss_mb", peak_rss_mb()}};
    if (reducer) {  // per rank: peak memory and time spent waiting for the other ranks
      nlohmann::json rss = nlohmann::json::array(), wait = nlohmann::json::array();
      for (const auto& v : group.allgather(std::vector<double>{peak_rss_mb(), reducer->wait_seconds()})) {
        rss.push_back(v[0]);
        wait.push_back(v[1]);
      }
      line["ranks"] = group.size();
      line["rank_peak_rss_mb"] = rss;
      line["rank_comm_wait_s"] = wait;
      line["comm_bytes_per_rank"] = reducer->bytes_sent_per_step();
    }
    log(line);
    bar.update(step, r.loss, so.lr, tps);
    summary.last_loss = r.loss;
    state.step = step + 1;
    state.cursor = batches.cursor();

    bool last = state.step == c.iters;
    if (!valid.examples.empty() && (state.step % c.steps_per_eval == 0 || last)) {
      double v = validation_loss(*model, valid.examples, c, group);
      log({{"step", state.step}, {"val_loss", v}});
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
    if (c.sync_check_every > 0 && (state.step % c.sync_check_every == 0 || last))
      check_same_parameters(group, tensors, str_cat("after step ", state.step));
    if (state.step % c.save_every == 0 || last) {
      save_all(c.out);
      save_state();
    }
    if (last) break;
  }
  bar.finish();
  summary.steps = state.step;
  return summary;
}
}  // namespace

TrainSummary run_training(const TrainConfig& config) {
  Distributed& group = world_group();
  if (group.size() == 1) return train(config, group);
  try {
    return train(config, group);
  } catch (const std::exception& e) {
    group.abort(e.what());  // ends every rank: the others would wait for this one forever
  }
}

}  // namespace glm4
