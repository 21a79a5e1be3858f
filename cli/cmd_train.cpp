// glm4 train: LoRA (or full) fine-tuning. Flags mirror mlx-lm's `lora` command; every flag is
// also a key of the --config JSON file (underscores for dashes), and flags win over the file.
#include <cstdio>
#include <map>
#include <memory>
#include <type_traits>
#include <utility>

#include "cli/cli_common.h"
#include "io/file/json_file.h"
#include "train/train_settings.h"
#include "train/trainer.h"

namespace glm4::cli {

namespace {

struct TrainFlags {
  std::string config_file;                   // --config
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

// The --config file's settings, with the flags given on top.
TrainConfig train_config(const TrainFlags& f) {
  TrainConfig config;
  if (!f.config_file.empty())
    apply_json(config,
               with_flag("--config", f.config_file, [&] { return read_json_file(f.config_file); }),
               f.config_file);
  nlohmann::json from_flags = to_json(f.values);
  nlohmann::json passed = nlohmann::json::object();
  for (const auto& [key, option] : f.given) {
    if (option->count() == 0) continue;
    auto list = f.lists.find(key);
    passed[key] = list != f.lists.end() ? nlohmann::json(list->second) : from_flags[key];
  }
  apply_json(config, passed, "command line");
  return config;
}

void run_train(const TrainFlags& f) {
  const TrainConfig config = train_config(f);
  TrainSummary s = run_training(config);
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
                  "JSON file of settings (keys = flag names with underscores)");
  add_setting_flags(app, *f);
  out.push_back({app, [f] { run_train(*f); }});
}

}  // namespace glm4::cli
