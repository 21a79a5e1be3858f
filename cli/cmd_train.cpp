// glm4 train: LoRA (or full) fine-tuning. Flags mirror mlx-lm's `lora` command; every flag is
// also a key of the --config JSON file (underscores for dashes), and flags win over the file.
#include <fstream>
#include <map>
#include <type_traits>

#include "cli/cli_common.h"
#include "train/train_settings.h"
#include "train/trainer.h"

namespace glm4::cli {

void add_train_command(CLI::App& parent, std::vector<Command>& out) {
  CLI::App* app = parent.add_subcommand("train", "Fine-tune a model with LoRA (or fully with --full)");
  auto flags = std::make_shared<TrainConfig>();
  auto config_file = std::make_shared<std::string>();
  auto lists = std::make_shared<std::map<std::string, std::string>>();  // as typed: "q_proj,v_proj"
  // key (as in the JSON config) -> option, to know which flags were given.
  auto given = std::make_shared<std::vector<std::pair<std::string, CLI::Option*>>>();
  app->add_option("--config", *config_file, "JSON file of settings (keys = flag names with underscores)");
  // One flag per setting of train_settings.h: a switch for a bool, a comma-separated text for a list.
  visit_train_settings([&](const char* key, auto member, const char* help) {
    using T = std::remove_reference_t<decltype((*flags).*member)>;
    const std::string name = train_flag_name(key), text = help ? help : kComputeFlagHelp;
    CLI::Option* option;
    if constexpr (std::is_same_v<T, bool>) option = app->add_flag(name, (*flags).*member, text);
    else if constexpr (std::is_same_v<T, std::vector<std::string>>) option = app->add_option(name, (*lists)[key], text);
    else option = app->add_option(name, (*flags).*member, text);
    given->push_back({key, option});
  });

  out.push_back({app, [flags, config_file, lists, given] {
    TrainConfig config;
    if (!config_file->empty()) {
      std::ifstream in(*config_file);
      GLM4_CHECK(in, "--config ", *config_file, ": cannot read the file");
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(in);
      } catch (const nlohmann::json::exception& e) {
        fail("--config ", *config_file, ": invalid JSON: ", e.what());
      }
      apply_json(config, j, *config_file);
    }
    nlohmann::json from_flags = to_json(*flags);
    nlohmann::json passed = nlohmann::json::object();
    for (const auto& [key, opt] : *given) {
      if (opt->count() == 0) continue;
      auto list = lists->find(key);
      passed[key] = list != lists->end() ? nlohmann::json(list->second) : from_flags[key];
    }
    apply_json(config, passed, "command line");
    TrainSummary s = run_training(config);
    if (s.rank != 0) return;  // under mpirun, rank 0 reports
    std::fprintf(stderr, "trained %lld steps; last loss %.4f", (long long)s.steps, s.last_loss);
    if (s.best_val_loss >= 0) std::fprintf(stderr, "; best val loss %.4f", s.best_val_loss);
    std::fprintf(stderr, "\n%s: %s\n", config.full ? "model" : "adapter", config.out.c_str());
    if (s.best_val_loss >= 0) std::fprintf(stderr, "lowest validation loss: %s/best\n", config.out.c_str());
  }});
}

}  // namespace glm4::cli
