// glm4: one binary, one subcommand per job. Every failure prints one message naming the flag or
// file at fault and exits with status 1.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "base/check.h"
#include "cli/cli_common.h"

namespace {
// CLI11 reports an unknown subcommand as "A subcommand is required"; name it instead.
void check_subcommand_names(CLI::App& app, int argc, char** argv) {
  CLI::App* level = &app;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.empty() || arg[0] == '-') return;
    auto subs = level->get_subcommands([](CLI::App*) { return true; });
    if (subs.empty()) return;
    std::string known;
    CLI::App* next = nullptr;
    for (CLI::App* s : subs) {
      known += (known.empty() ? "" : ", ") + s->get_name();
      if (s->get_name() == arg) next = s;
    }
    if (!next) glm4::fail("unknown command \"", arg, "\" (known: ", known, ")");
    level = next;
  }
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"glm4: train, LoRA fine-tune and run GLM-4 models on CPUs"};
  app.require_subcommand(1);
  app.footer("Run glm4 SUBCOMMAND --help for a subcommand's flags.");
  std::vector<glm4::cli::Command> commands;
  try {
    glm4::cli::add_init_command(app, commands);
    glm4::cli::add_logits_command(app, commands);
    glm4::cli::add_adapter_command(app, commands);
    glm4::cli::add_train_command(app, commands);
    glm4::cli::add_generate_command(app, commands);
    glm4::cli::add_chat_command(app, commands);
    glm4::cli::add_fuse_command(app, commands);
    glm4::cli::add_quantize_command(app, commands);
    glm4::cli::add_perplexity_command(app, commands);
    glm4::cli::add_evaluate_command(app, commands);
    glm4::cli::add_classify_command(app, commands);
    glm4::cli::add_tokenize_command(app, commands);
    glm4::cli::add_tokenizer_command(app, commands);
    glm4::cli::add_plot_command(app, commands);
    glm4::cli::add_serve_command(app, commands);
    glm4::cli::add_export_command(app, commands);
    check_subcommand_names(app, argc, argv);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      if (e.get_exit_code() == 0) return app.exit(e);  // --help
      std::fprintf(stderr, "glm4: %s\nRun with --help for more information.\n", e.what());
      return 1;
    }
    for (const auto& c : commands)
      if (c.app->parsed()) {
        c.run();
        return 0;
      }
    std::fprintf(stderr, "glm4: no command given; run glm4 --help\n");
    return 1;
  } catch (const glm4::cli::ExitStatus& e) {
    return e.status;
  } catch (const glm4::Error& e) {
    std::fprintf(stderr, "glm4: error: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "glm4: error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "glm4: error: unknown exception\n");
  }
  return 1;
}
