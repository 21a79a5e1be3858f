// glm4: one binary, one subcommand per job.
#include <CLI/CLI.hpp>
#include <cstdio>

int main(int argc, char** argv) {
  CLI::App app{"glm4: train, LoRA fine-tune and run GLM-4 models on CPUs"};
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
