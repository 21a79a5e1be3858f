// The training loop behind `glm4 train`, as mlx-lm's tuner/trainer.py runs it: steps with their
// metrics, evaluation with best/ saves and early stopping, adapter and checkpoint saves. The run
// it steps is built by train_setup.cpp.
#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "base/check.h"
#include "base/parallel.h"
#include "base/peak_rss.h"
#include "base/progress_bar.h"
#include "dataset/batch_iterator.h"
#include "dataset/step_split.h"
#include "infer/score.h"
#include "model/adapter/adapter_io.h"
#include "model/save.h"
#include "train/distributed.h"
#include "train/fault_injection.h"
#include "train/lr_schedule.h"
#include "train/metrics_log.h"
#include "train/param_sync.h"
#include "train/run_summary.h"
#include "train/stop_signals.h"
#include "train/train_setup.h"
#include "train/train_step.h"

namespace fs = std::filesystem;

namespace glm4 {

namespace {
// Token-weighted validation loss over the first --val-batches batches (-1: all). Rank r scores
// batches r, r + N, ...; the totals are added in batch order, so the value is one process's.
double validation_loss(const Glm4Model& model, const std::vector<Example>& examples,
                       const TrainConfig& c, Distributed& group) {
  const int64_t n = int64_t(examples.size()), bs = c.batch_size,
                limit = c.val_batches > 0 ? c.val_batches : 0;
  const int64_t batches = limit > 0 ? std::min((n + bs - 1) / bs, limit) : (n + bs - 1) / bs;
  std::vector<double> mine(size_t(2 * batches), 0.0);  // total, tokens per batch
  for (const BatchScore& b :
       score_batches(model, examples, bs, limit, group.rank(), group.size())) {
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
                                      const TrainConfig& c, const Distributed& group,
                                      int64_t* first_micro) {
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

// The temporary files (`*.tmp`, io/file/atomic_file.h) a killed run left in OUT and OUT/best: a
// save that never finished. The files they were to replace are whole.
void remove_stale_temporaries(const fs::path& out) {
  for (const fs::path& dir : {out, out / "best"}) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.is_regular_file() && e.path().extension() == ".tmp") fs::remove(e.path(), ec);
  }
}

// The loop over one run's steps; each part of a step is a function of its own.
struct TrainLoop {
  TrainLoop(TrainRun& run, Distributed& group, ProgressBar& bar)
      : run(run), group(group), bar(bar) {}

  TrainRun& run;
  Distributed& group;
  ProgressBar& bar;
  const TrainConfig& c = run.config;
  std::optional<MetricsLog> metrics;  // rank 0 alone writes
  double report_loss = 0;             // the losses of the steps since the last report, summed
  int64_t report_steps = 0;
  TrainSummary summary;

  void log(const nlohmann::json& line) {
    if (metrics) metrics->write(line);
  }

  // OUT (without what a killed run left half-written), metrics.jsonl and its set-up line, which
  // holds the run's summary (printed too).
  void open_output(int64_t batches_per_epoch) {
    const TrainState& state = run.state;
    const ComputeChoice& compute = run.compute;
    if (group.root()) {
      fs::create_directories(c.out);
      remove_stale_temporaries(c.out);
      metrics.emplace(fs::path(c.out) / "metrics.jsonl", !c.resume.empty(), state.step);
    }
    nlohmann::json setup = {
        {"step", state.step}, {"threads", max_threads()}, {"ranks", group.size()}};
    setup.update(kernel_report(compute).fields());
    setup.update(run.model->loaded.fields());
    const nlohmann::json about = run_summary(run, batches_per_epoch);
    setup.update(about);
    bar.message(describe_run_summary(about, run));
    log(setup);
  }

  // The adapter, or with --full the whole model, into `dir` (rank 0).
  void save_weights(const fs::path& dir) {
    if (!group.root()) return;
    Glm4Model& model = *run.model;
    if (c.full) {
      save_model(model, model.config, dir, model.config.torch_dtype, 0);
      copy_model_companions(c.model, dir, model.config);
    } else
      save_adapter(model, run.lora, dir, c.adapter_format, c.model);
  }

  // OUT/checkpoint.h5, by rank 0; with a reducer every rank takes part in gathering the moments.
  void save_checkpoint() {
    const fs::path file = fs::path(c.out) / "checkpoint.h5";
    if (!run.reducer) return save_training_state(file, c, run.optimizer, run.state);
    MomentSource gather = [&](size_t i, std::vector<float>* m, std::vector<float>* v) {
      run.reducer->gather_moments(run.optimizer, i, m, v);
    };
    if (group.root()) return save_training_state(file, c, run.optimizer, run.state, gather);
    std::vector<float> m, v;
    for (size_t i = 0; i < run.tensors.size(); ++i) gather(i, &m, &v);  // rank 0 asks in this order
  }

  // The validation loss of a fresh run before its first step.
  void evaluate_at_start() {
    if (!run.valid.examples.empty() && run.state.step == 0) {
      double v = validation_loss(*run.model, run.valid.examples, c, group);
      summary.first_val_loss = v;
      log({{"step", 0}, {"val_loss", v}});
      bar.message(str_cat("step 0: val loss ", v));
    }
    summary.best_val_loss = std::isfinite(run.state.best_val_loss) ? run.state.best_val_loss : -1;
  }

  // The step's metrics line; data-parallel, with each rank's peak memory and time spent waiting
  // for the other ranks.
  nlohmann::json step_line(int64_t step, const StepResult& r, double lr, double tps) {
    nlohmann::json line{{"step", step + 1},
                        {"loss", r.loss},
                        {"lr", lr},
                        {"grad_norm", r.grad_norm},
                        {"tokens", r.tokens},
                        {"tokens_per_s", tps},
                        {"peak_rss_mb", peak_rss_mb()}};
    if (const GradientReducer* reducer = run.reducer.get()) {
      nlohmann::json rss = nlohmann::json::array(), wait = nlohmann::json::array();
      for (const auto& v :
           group.allgather(std::vector<double>{peak_rss_mb(), reducer->wait_seconds()})) {
        rss.push_back(v[0]);
        wait.push_back(v[1]);
      }
      line["ranks"] = group.size();
      line["rank_peak_rss_mb"] = rss;
      line["rank_comm_wait_s"] = wait;
      line["comm_bytes_per_rank"] = reducer->bytes_sent_per_step();
    }
    return line;
  }

  // Optimizer step `step` (from 0) on the next micro-batches, logged and shown on the bar.
  StepResult take_step(int64_t step, BatchIterator& batches, const LrSchedule& schedule) {
    auto t0 = std::chrono::steady_clock::now();
    StepOptions so;
    std::vector<Batch> micro =
        next_micro_batches(batches, run.train.examples, c, group, &so.first_micro);
    so.lr = schedule.at(step);
    so.max_grad_norm = c.grad_clip;
    so.recompute_layers = c.grad_checkpoint;
    so.dropout_seed = c.seed * 1000003ull + uint64_t(step);
    StepResult r = train_step(*run.model, run.optimizer, micro, so, run.reducer.get());
    GLM4_CHECK(r.finite, "step ", step + 1, ": the loss or gradient norm is not finite (loss ",
               r.loss, ", gradient norm ", r.grad_norm,
               "); stopping. The last saved adapter and checkpoint in ", c.out,
               " are intact; try a lower --learning-rate or --grad-clip");
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double tps = double(r.tokens) / std::max(seconds, 1e-9);
    // The report shows the mean loss of the steps since the last report (mlx-lm's "Train loss").
    report_loss += r.loss;
    ++report_steps;
    const double mean = report_loss / double(report_steps);
    nlohmann::json line = step_line(step, r, so.lr, tps);
    const bool report = (step + 1) % c.steps_per_report == 0 || step + 1 == c.iters;
    if (report) {
      line["train_loss"] = mean;
      report_loss = 0;
      report_steps = 0;
    }
    log(line);
    bar.update(step, mean, so.lr, tps);
    return r;
  }

  // True when --patience evaluations in a row brought no improvement.
  bool out_of_patience() {
    if (c.patience > 0 && run.state.evals_without_improvement >= c.patience) {
      bar.message(str_cat("early stop: no improvement in ", c.patience, " evaluations"));
      summary.stopped_early = true;
      return true;
    }
    return false;
  }

  // The validation loss after a step; a new lowest one saves its weights to OUT/best. True to
  // stop early.
  bool evaluate() {
    TrainState& state = run.state;
    double v = validation_loss(*run.model, run.valid.examples, c, group);
    log({{"step", state.step}, {"val_loss", v}});
    bar.message(str_cat("step ", state.step, ": val loss ", v));
    if (v < state.best_val_loss) {
      state.best_val_loss = v;
      state.evals_without_improvement = 0;
      save_weights(fs::path(c.out) / "best");
    } else {
      ++state.evals_without_improvement;
    }
    summary.best_val_loss = state.best_val_loss;
    return out_of_patience();
  }

  // The signal that asks this run to stop, or 0; data-parallel ranks agree (any rank's signal
  // stops them all after the same step).
  int stop_requested(const StopSignals& signals) {
    const int sig = signals.received();
    if (group.size() == 1) return sig;
    int any = 0;
    for (uint64_t s : group.allgather(uint64_t(sig))) any = std::max(any, int(s));
    return any;
  }

  TrainSummary train() {
    TrainState& state = run.state;
    StopSignals signals;
    summary.rank = group.rank();
    BatchOptions bo;
    bo.batch_size = c.batch_size;
    bo.max_seq_length = c.max_seq_length;
    bo.pack = c.pack;
    bo.seed = c.seed;
    bo.drop_last = int64_t(run.train.examples.size()) >= c.batch_size;
    BatchIterator batches(run.train.examples, bo);  // every rank walks the global cursor
    batches.set_cursor(state.cursor);
    open_output(batches.batches_per_epoch());
    LrSchedule schedule{c.lr_schedule, c.learning_rate, c.warmup, c.iters, c.min_lr};
    schedule.validate();
    evaluate_at_start();

    bar = ProgressBar(state.step, c.iters, c.steps_per_report, !group.root());
    for (int64_t step = state.step; step < c.iters; ++step) {
      inject_fault(group.rank(), step + 1, run.tensors);
      StepResult r = take_step(step, batches, schedule);
      summary.last_loss = r.loss;
      state.step = step + 1;
      state.cursor = batches.cursor();

      bool last = state.step == c.iters;
      if (!run.valid.examples.empty() && (state.step % c.steps_per_eval == 0 || last) && evaluate())
        last = true;
      if (c.sync_check_every > 0 && (state.step % c.sync_check_every == 0 || last))
        check_same_parameters(group, run.tensors, str_cat("after step ", state.step));
      const bool save = state.step % c.save_every == 0 || last;
      if (save) {
        save_weights(c.out);
        save_checkpoint();
      }
      if (last) break;
      if (const int sig = stop_requested(signals)) {
        if (!save) {
          save_weights(c.out);
          save_checkpoint();
        }
        summary.signal = sig;
        break;
      }
    }
    bar.finish();
    summary.steps = state.step;
    return summary;
  }
};

TrainSummary train(const TrainConfig& config, Distributed& group) {
  ProgressBar bar(0, config.iters, config.steps_per_report, !group.root());
  TrainRun run = set_up_training(config, group, bar);
  return TrainLoop(run, group, bar).train();
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
