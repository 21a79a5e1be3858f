// glm4 train: LoRA (or full) fine-tuning. Flags mirror mlx-lm's `lora` command; every flag is
// also a key of the --config JSON file (underscores for dashes), and flags win over the file.
#include <csignal>
#include <cstdio>
#include <map>
#include <memory>
#include <type_traits>
#include <utility>

#include "cli/cli_common.h"
#include "train/config_keys.h"
#include "train/distributed.h"
#include "train/resume_plan.h"
#include "train/train_settings.h"
#include "train/trainer.h"
#include "train/training_state.h"

namespace glm4::cli {

namespace {

struct TrainFlags {
  std::string config_file;                   // --config
  bool force = false;                        // --force: a fresh run may write into a used --out
  TrainConfig values;                        // the flags' values; those given win over the file
  std::map<std::string, std::string> lists;  // list settings as typed ("q_proj,v_proj"), by key
  std::vector<std::pair<std::string, CLI::Option*>> given;  // every setting's option, by key
};

// One flag per setting of train_settings.h: a switch for a bool, a comma-separated text for a list.
void add_setting_flags(CLI::App* app, TrainFlags& f) {
  visit_train_settings([&](const char* key, auto member, const char* help) {
    using T = std::remove_reference_t<decltype(f.values.*member)>;
    const std::string name = train_flag_name(key), text = help ? help : kComputeFlagHelp;
    CLI::Option* option;
    if constexpr (std::is_same_v<T, bool>)
      option = app->add_flag(name, f.values.*member, text);
    else if constexpr (std::is_same_v<T, std::vector<std::string>>)
      option = app->add_option(name, f.lists[key], text);
    else
      option = app->add_option(name, f.values.*member, text);
    f.given.push_back({key, option});
  });
}

// The settings named in the --config file and on the command line (which wins), by key.
nlohmann::json given_settings(const TrainFlags& f) {
  nlohmann::json given = nlohmann::json::object();
  if (!f.config_file.empty())
    given = with_flag("--config", f.config_file, [&] { return read_config_file(f.config_file); });
  GLM4_CHECK(given.is_object(), f.config_file, ": a training config must be a JSON object");
  nlohmann::json from_flags = to_json(f.values);
  for (const auto& [key, option] : f.given) {
    if (option->count() == 0) continue;
    auto list = f.lists.find(key);
    given[key] = list != f.lists.end() ? nlohmann::json(list->second) : from_flags[key];
  }
  return given;
}

bool same_directory(const std::filesystem::path& a, const std::filesystem::path& b) {
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec);
}

// What OUT holds when it is an earlier run: "a run at step 40 of 100".
std::string earlier_run(const std::filesystem::path& out) {
  const std::filesystem::path checkpoint = out / "checkpoint.h5";
  if (!std::filesystem::is_regular_file(checkpoint)) return "";
  try {
    CheckpointSummary s = read_checkpoint_summary(checkpoint);
    return str_cat("; it is a training run at step ", s.state.step, " of ", s.config.iters,
                   ": to continue it, glm4 train --resume ", checkpoint.string());
  } catch (const Error&) {
    return "";
  }
}

// A run never writes over another one unless told: a fresh run needs an empty (or missing) --out
// or --force; a resumed run writes into its checkpoint's directory, else into an empty one.
void check_run_output(const TrainConfig& c, bool force) {
  const std::filesystem::path out = c.out;
  if (!c.resume.empty()) {
    if (same_directory(out, std::filesystem::path(c.resume).parent_path())) return;
    check_output_dir(out, "--out", force,
                     "; the resumed run writes into the checkpoint's own "
                     "directory when --out is left out");
    return;
  }
  check_output_dir(out, "--out", force, earlier_run(out));
  if (!force) return;
  // --force starts afresh: what would pass for this run's state goes first.
  std::error_code ec;
  std::filesystem::remove(out / "checkpoint.h5", ec);
  std::filesystem::remove_all(out / "best", ec);
}

// The settings to train with: --resume's checkpoint's, with the settings given again applied or
// refused (train/resume_plan.h); else the defaults with the --config file's and the flags' on top.
TrainConfig train_config(const TrainFlags& f) {
  const nlohmann::json given = given_settings(f);
  const bool root = world_group().rank() == 0;
  auto resume = given.find("resume");
  if (resume == given.end() || !resume->is_string() || resume->get<std::string>().empty()) {
    TrainConfig config;
    apply_json(config, given, f.config_file.empty() ? "command line" : f.config_file);
    return config;
  }
  const std::string checkpoint = resume->get<std::string>();
  ResumePlan plan = [&] {
    try {
      return plan_resume(checkpoint, given);
    } catch (const Error& e) {  // the checkpoint's own reader does not know the flag
      const std::string what = e.what();
      if (what.find("--") != std::string::npos) throw;
      throw Error("--resume " + checkpoint + ": " + what);
    }
  }();
  if (root) {
    std::fprintf(stderr, "resuming run %s from step %lld of %lld\n", plan.config.out.c_str(),
                 (long long)plan.step, (long long)plan.config.iters);
    for (const std::string& note : plan.notes) std::fprintf(stderr, "%s\n", note.c_str());
  }
  return plan.config;
}

void run_train(const TrainFlags& f) {
  const TrainConfig config = train_config(f);
  config.validate();
  check_run_output(config, f.force);
  check_model_dir(config.model, "--model", true);
  TrainSummary s = run_training(config);
  if (s.signal != 0) {
    if (s.rank == 0)
      std::fprintf(stderr,
                   "stopped by %s after step %lld of %lld; adapter and checkpoint saved in %s\n"
                   "to continue: glm4 train --resume %s\n",
                   s.signal == SIGINT ? "SIGINT" : "SIGTERM", (long long)s.steps,
                   (long long)config.iters, config.out.c_str(),
                   (std::filesystem::path(config.out) / "checkpoint.h5").c_str());
    throw ExitStatus{128 + s.signal};
  }
  if (s.rank != 0) return;  // under mpirun, rank 0 reports
  std::fprintf(stderr, "trained %lld steps; last loss %.4f", (long long)s.steps, s.last_loss);
  if (s.best_val_loss >= 0) std::fprintf(stderr, "; best val loss %.4f", s.best_val_loss);
  std::fprintf(stderr, "\n%s: %s\n", config.full ? "model" : "adapter", config.out.c_str());
  if (s.best_val_loss >= 0)
    std::fprintf(stderr, "lowest validation loss: %s/best\n", config.out.c_str());
}

}  // namespace

void add_train_command(CLI::App& parent, std::vector<Command>& out) {
  CLI::App* app =
      parent.add_subcommand("train", "Fine-tune a model with LoRA (or fully with --full)");
  auto f = std::make_shared<TrainFlags>();
  app->add_option("--config", f->config_file,
                  "JSON file of settings (keys = flag names with underscores; mlx-lm's "
                  "lora_parameters, adapter_path ... are understood)");
  add_setting_flags(app, *f);
  app->add_flag("--force", f->force,
                "Start a new run in a --out that holds files (an earlier run's checkpoint and "
                "best/ are removed first)");
  out.push_back({app, [f] { run_train(*f); }});
}

}  // namespace glm4::cli
