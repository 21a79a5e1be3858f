// glm4 classify: pick each record's answer from a fixed list of labels by the log-probability the
// model gives each label as the answer (one batched forward per batch of records, no decoding);
// prints accuracy overall, per task and as a confusion count when the records hold answers.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "base/strings.h"
#include "cli/cli_common.h"
#include "cli/flag_groups.h"
#include "cli/model_session.h"
#include "dataset/records.h"
#include "dataset/text_encoder.h"
#include "infer/classify.h"
#include "io/file/atomic_file.h"
#include "io/file/json_line.h"

namespace glm4::cli {

namespace {

struct ClassifyFlags {
  ModelFlags model;
  AdapterFlags adapter;
  DataFlags data{8};
  std::string labels, task, predictions, compute = "auto";
  bool force = false;
};

std::vector<std::string> parse_labels(const std::string& text) {
  std::vector<std::string> labels;
  std::set<std::string> seen;
  size_t at = 0;
  while (true) {
    size_t comma = text.find(',', at);
    std::string label =
        trim(text.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    GLM4_CHECK(!label.empty(), "--labels \"", text, "\": an empty label (write them as A,B,...)");
    GLM4_CHECK(seen.insert(label).second, "--labels \"", text, "\": \"", label, "\" appears twice");
    labels.push_back(label);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  GLM4_CHECK(labels.size() >= 2, "--labels \"", text, "\": give at least two labels");
  return labels;
}

void run_classify(const ClassifyFlags& f) {
  f.data.check_batch_size();
  const std::vector<std::string> labels = parse_labels(f.labels);
  if (!f.predictions.empty()) check_output_file(f.predictions, "--predictions", f.force);
  ModelSession s = open_without_weights(f.model.dir, f.adapter.dir, {"classify"});
  const TextEncoder encoder = make_text_encoder(f.model.dir);

  std::vector<int64_t> lines;         // of each record in --data
  std::vector<RecordAnswer> answers;  // the record's answer and task
  std::vector<std::vector<Example>> candidates;
  int64_t first_line = 0;
  bool with_answers = false;
  with_flag("--data", f.data.file, [&] {
    for_each_record(f.data.file, [&](const Record& r, int64_t line) {
      if (!f.task.empty() && r.task != f.task) return;
      std::optional<std::string> answer = record_answer(r);
      if (lines.empty()) {
        first_line = line;
        with_answers = answer.has_value();
      }
      GLM4_CHECK(answer.has_value() == with_answers, "this record ", answer ? "has" : "has no",
                 " answer but line ", first_line, answer ? " has none" : " has one",
                 ": accuracy needs an answer in every record (or in none, for predictions only)");
      RecordAnswer a{-1, r.task, 0};
      if (answer) {
        auto it = std::find(labels.begin(), labels.end(), trim(*answer));
        GLM4_CHECK(it != labels.end(), "the answer \"", *answer, "\" is not one of --labels ",
                   f.labels);
        a.label = it - labels.begin();
      }
      candidates.push_back(candidate_examples(r, labels, encoder));
      if (answer) a.tokens = count_targets(candidates.back()[size_t(a.label)]);
      lines.push_back(line);
      answers.push_back(a);
    });
  });
  GLM4_CHECK(!lines.empty(), "--data ", f.data.file, ": no records",
             f.task.empty() ? "" : " of --task " + f.task);

  load_weights(s, f.compute, f.model.memory());
  std::vector<Classification> results = classify(*s.model, candidates, f.data.batch_size);
  const ClassifyReport report = summarize(results, answers, labels.size());

  using json = nlohmann::json;
  json j{{"examples", lines.size()}, {"labels", labels}};
  if (!f.task.empty()) j["task"] = f.task;
  json counts = json::object();
  for (size_t k = 0; k < labels.size(); ++k) counts[labels[k]] = report.predicted[k];
  if (report.with_answers) {
    j["accuracy"] = report.accuracy;
    if (!report.accuracy_by_task.empty()) j["accuracy_by_task"] = report.accuracy_by_task;
    j["answer_loss"] = report.answer_loss;
    json c = json::object();  // answer -> predicted -> count
    for (size_t a = 0; a < labels.size(); ++a) {
      json row = json::object();
      for (size_t p = 0; p < labels.size(); ++p) row[labels[p]] = report.confusion[a][p];
      c[labels[a]] = row;
    }
    j["confusion"] = c;
  }
  j["predicted"] = counts;
  j.update(kernel_report(s.compute).fields());

  if (!f.predictions.empty()) {
    AtomicFileWriter p(f.predictions);  // a killed run leaves no half-written file
    for (size_t i = 0; i < lines.size(); ++i) {
      json row{{"line", lines[i]}};
      if (!answers[i].task.empty()) row["task"] = answers[i].task;
      if (answers[i].label >= 0) row["answer"] = labels[size_t(answers[i].label)];
      row["predicted"] = labels[size_t(results[i].predicted)];
      json lp = json::object();
      for (size_t k = 0; k < labels.size(); ++k) lp[labels[k]] = results[i].log_probs[k];
      row["log_probs"] = lp;
      p.write(json_line(row) + "\n");
    }
    p.commit();
  }
  print_json(j);
}

}  // namespace

void add_classify_command(CLI::App& parent, std::vector<Command>& out) {
  CLI::App* app = parent.add_subcommand(
      "classify",
      "Choose each record's answer among --labels by log-probability (one forward, no decoding)");
  auto f = std::make_shared<ClassifyFlags>();
  f->model.add(app);
  f->adapter.add(app);
  f->data
      .add(app,
           "JSONL of {\"messages\": [...]} ending with the assistant turn to classify (or a user "
           "turn: no "
           "answer), or {\"prompt\", \"completion\"}",
           "Records per forward pass, each with every label")
      ->required();
  app->add_option("--labels", f->labels, "The candidate answers, comma-separated: A,B,...")
      ->required();
  app->add_option("--task", f->task, "Classify only the records whose \"task\" is this");
  app->add_option("--predictions", f->predictions,
                  "Write one JSON line per record: its label log-probabilities");
  app->add_flag("--force", f->force, "Replace --predictions when the file exists");
  add_compute_flag(app, f->compute);
  f->model.add_memory_flags(app);
  out.push_back({app, [f] { run_classify(*f); }});
}

}  // namespace glm4::cli
