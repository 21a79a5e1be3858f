// glm4 evaluate: score a model (optionally with an adapter) on held-out chat examples: the
// exact-match rate of its greedy answer to each final assistant turn, and the loss on those
// answers. Prints one JSON object (with exact match and answer loss per "task" when the records
// name one).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "autograd/node.h"
#include "base/strings.h"
#include "cli/cli_common.h"
#include "cli/flag_groups.h"
#include "cli/model_session.h"
#include "dataset/dataset.h"
#include "dataset/records.h"
#include "dataset/text_encoder.h"
#include "infer/score.h"

namespace glm4::cli {

namespace {
struct EvaluateFlags {
  ModelFlags model;
  AdapterFlags adapter;
  DataFlags data{16};
  std::string label, compute = "auto";
  int64_t max_examples = 0;
  bool show = false;
};

void run_evaluate(const EvaluateFlags& f) {
  f.data.check_batch_size();
  GLM4_CHECK(f.max_examples >= 0, "--max-examples: must be >= 0, got ", f.max_examples);
  ModelSession s = open_without_weights(f.model.dir, f.adapter.dir, {"evaluate"});
  // A folder: its test.jsonl, else valid.jsonl (train's folder layout).
  const std::string file =
      with_flag("--data", f.data.file, [&] { return resolve_eval_path(f.data.file); });
  std::vector<AnswerExample> examples;
  with_flag("--data", file, [&] {
    for_each_record(file, [&](const Record& r, int64_t /*line: for_each_record names it*/) {
      if (f.max_examples > 0 && int64_t(examples.size()) >= f.max_examples) return;
      if (r.kind == Record::Kind::kPromptCompletion) {
        examples.push_back({s.encode_prompt(r.prompt), r.completion, r.task});
        return;
      }
      GLM4_CHECK(r.kind == Record::Kind::kChat && r.messages.size() >= 2 &&
                     r.messages.back().role == "assistant",
                 "evaluate needs records with an answer: {\"prompt\", \"completion\"} or "
                 "{\"messages\"} ending with an assistant turn (text and input_ids records have "
                 "none; glm4 perplexity scores them)");
      std::vector<ChatMessage> context(r.messages.begin(), r.messages.end() - 1);
      examples.push_back({s.render(context), r.messages.back().content, r.task});
    });
  });
  GLM4_CHECK(!examples.empty(), "--data ", f.data.file, ": no examples");
  load_weights(s, f.compute, f.model.memory());
  ExactMatchScore em =
      score_exact_match(*s.model, *s.tokenizer, examples, s.stop_ids(true), f.data.batch_size);
  if (f.show)
    for (size_t i = 0; i < examples.size(); ++i) {
      const std::string reference = trim(examples[i].reference);
      std::fprintf(stderr, "%s %s  |  expected: %s\n",
                   em.answers[i] == reference ? "[ok]  " : "[miss]", em.answers[i].c_str(),
                   reference.c_str());
    }
  DatasetOptions o;
  o.mask_prompt = true;
  o.vocab_size = s.model->config.vocab_size;
  Dataset d = load_dataset(file, make_text_encoder(f.model.dir), o);
  d.examples.resize(std::min(d.examples.size(), examples.size()));
  LossScore p = score_loss(*s.model, d.examples, 8);
  nlohmann::json j{
      {"label", f.label.empty() ? (f.adapter.dir.empty() ? "base" : "adapted") : f.label},
      {"examples", examples.size()},
      {"exact_match", em.rate()},
      {"answer_loss", p.loss},
      {"answer_tokens", p.tokens}};
  j.update(kernel_report(s.compute).fields());
  if (!em.by_task.empty()) {
    j["exact_match_by_task"] = em.rate_by_task();
    std::vector<std::string> tasks;
    for (const AnswerExample& e : examples) tasks.push_back(e.task);
    nlohmann::json l = nlohmann::json::object();
    for (const auto& [task, loss] : score_loss_by_task(*s.model, d.examples, tasks, 8))
      l[task] = loss.loss;
    j["answer_loss_by_task"] = l;
  }
  print_json(j);
}
}  // namespace

void add_evaluate_command(CLI::App& parent, std::vector<Command>& out) {
  CLI::App* app =
      parent.add_subcommand("evaluate", "Exact match and answer loss on held-out chat examples");
  auto f = std::make_shared<EvaluateFlags>();
  f->model.add(app);
  f->adapter.add(app);
  f->data
      .add(app,
           "JSONL of {\"messages\": [...]} ending with an assistant turn or {\"prompt\", "
           "\"completion\"} records, or a data folder: its test.jsonl, else valid.jsonl",
           "Prompts generated together")
      ->required();
  app->add_option("--label", f->label, "Name for this run in the output");
  app->add_option("--max-examples", f->max_examples, "Score only the first N examples");
  app->add_flag("--show", f->show, "Print every answer next to the reference (stderr)");
  add_compute_flag(app, f->compute);
  f->model.add_memory_flags(app);
  out.push_back({app, [f] { run_evaluate(*f); }});
}

}  // namespace glm4::cli
