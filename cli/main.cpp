// glm4: one binary, one subcommand per job. Every failure prints one message naming the flag or
// file at fault and exits with status 1.
#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <sstream>
#include <string>

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
// The option named `name` in `app` or any of its subcommands, or null.
const CLI::Option* find_option(const CLI::App& app, const std::string& name) {
  for (const CLI::Option* o : app.get_options())
    if (o->get_name() == name) return o;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    if (const CLI::Option* o = find_option(*sub, name)) return o;
  return nullptr;
}

// The deepest subcommand parsed so far ("glm4 adapter" for glm4 adapter --bogus).
const CLI::App* parsed_level(const CLI::App& app) {
  const CLI::App* level = &app;
  for (std::vector<CLI::App*> chosen; !(chosen = level->get_subcommands()).empty();)
    level = chosen.front();
  return level;
}

// "glm4 train": the subcommands parsed so far, for the pointer to their --help.
std::string command_path(const CLI::App& app) {
  std::string path = "glm4";
  const CLI::App* last = parsed_level(app);
  for (const CLI::App* level = &app; level != last;) {
    level = level->get_subcommands().front();
    path += " " + level->get_name();
  }
  return path;
}

// CLI11 lists arguments it did not expect last first ("bogus --chat-format"); the flags among
// them, in the order given, or all of them when none is a flag.
std::string unexpected(const std::string& list) {
  std::vector<std::string> words, flags;
  std::istringstream in(list);
  for (std::string w; in >> w;) words.push_back(w);
  for (auto w = words.rbegin(); w != words.rend(); ++w)
    if (w->size() > 1 && (*w)[0] == '-') flags.push_back(*w);
  if (flags.empty()) return list + ": unknown flags or arguments";
  std::string out;
  for (const std::string& f : flags) out += (out.empty() ? "" : ", ") + f;
  return out + (flags.size() == 1 ? ": unknown flag" : ": unknown flags");
}

// CLI11's parse errors in the house style "FLAG: what is wrong": "Could not convert:
// --learning-rate = abc" becomes "--learning-rate: expected a number, got 'abc'".
std::string parse_error_message(const CLI::App& app, const CLI::ParseError& e) {
  const std::string what = e.what();
  const std::string convert = "Could not convert: ";
  if (dynamic_cast<const CLI::ConversionError*>(&e) && what.rfind(convert, 0) == 0) {
    const size_t eq = what.find(" = ", convert.size());
    if (eq != std::string::npos) {
      const std::string flag = what.substr(convert.size(), eq - convert.size());
      std::string value = what.substr(eq + 3);
      const CLI::Option* o = find_option(app, flag);
      const std::string type = o ? o->get_type_name() : "";
      // A number flag given twice: CLI11 shows "1,abc"; the last value is the one that counts.
      if (const size_t comma = value.rfind(',');
          comma != std::string::npos && (type == "FLOAT" || type == "INT" || type == "UINT"))
        value = value.substr(comma + 1);
      const char* expected = type == "FLOAT"  ? "a number"
                             : type == "INT"  ? "an integer"
                             : type == "UINT" ? "a whole number >= 0"
                                              : "another kind of value";
      return flag + ": expected " + expected + ", got '" + value + "'";
    }
  }
  const std::string extra = "The following argument was not expected: ";
  const std::string extras = "The following arguments were not expected: ";
  if (what.rfind(extra, 0) == 0) return what.substr(extra.size()) + ": unknown flag or argument";
  if (what.rfind(extras, 0) == 0) return unexpected(what.substr(extras.size()));
  if (what == "A subcommand is required") {  // "glm4 adapter": name the ones there are
    std::string known;
    for (const CLI::App* s :
         parsed_level(app)->get_subcommands([](const CLI::App*) { return true; }))
      known += (known.empty() ? "" : ", ") + s->get_name();
    if (parsed_level(app) == &app) return "expected a subcommand (" + known + ")";
    return command_path(app) + ": expected a subcommand (" + known + ")";
  }
  // A required positional argument: "metrics is required" -> "METRICS is required".
  const std::string required = " is required";
  if (dynamic_cast<const CLI::RequiredError*>(&e) && what.size() > required.size() &&
      what[0] != '-' &&
      what.compare(what.size() - required.size(), required.size(), required) == 0 &&
      what.find(' ') == what.size() - required.size()) {
    std::string name = what.substr(0, what.size() - required.size());
    for (char& c : name) c = char(std::toupper(static_cast<unsigned char>(c)));
    return name + required;
  }
  return what;
}

// A std::filesystem error as "PATH: cannot create directories: Not a directory" (libstdc++
// says "filesystem error: cannot create directories: Not a directory [PATH]").
std::string filesystem_message(const std::filesystem::filesystem_error& e) {
  std::string what = e.what();
  const std::string prefix = "filesystem error: ";
  if (what.rfind(prefix, 0) == 0) what = what.substr(prefix.size());
  if (const size_t bracket = what.find(" ["); bracket != std::string::npos)
    what = what.substr(0, bracket);
  return e.path1().empty() ? what : e.path1().string() + ": " + what;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"glm4: train, LoRA fine-tune and run GLM-4 models on CPUs"};
  app.require_subcommand(1);
  app.footer("Run glm4 SUBCOMMAND --help for a subcommand's flags.");
  // A flag given twice takes the last value, as argparse (and so mlx-lm) does. Subcommands copy
  // these defaults when they are added; repeatable (list) flags keep every value.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
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
      std::fprintf(stderr, "glm4: error: %s\nRun %s --help for the flags.\n",
                   parse_error_message(app, e).c_str(), command_path(app).c_str());
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
  } catch (const std::filesystem::filesystem_error& e) {
    std::fprintf(stderr, "glm4: error: %s\n", filesystem_message(e).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "glm4: error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "glm4: error: unknown exception\n");
  }
  return 1;
}
