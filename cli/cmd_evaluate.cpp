// glm4 evaluate: score a model (optionally with an adapter) on held-out chat examples: the
// exact-match rate of its greedy answer to each final assistant turn, and the loss on those
// answers. Prints one JSON object (with exact match per "task" when the records name one).
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "autograd/node.h"
#include "base/strings.h"
#include "cli/cli_common.h"
#include "cli/model_session.h"
#include "infer/generator.h"
#include "infer/perplexity.h"
#include "train/dataset.h"
#include "train/jsonl.h"
#include "train/text_encoder.h"

namespace glm4::cli {

void add_evaluate_command(CLI::App& parent, std::vector<Command>& out) {
  CLI::App* app = parent.add_subcommand("evaluate", "Exact match and answer loss on held-out chat examples");
  struct Flags {
    std::string model, adapter, data, label;
    int64_t batch_size = 16, max_examples = 0;
    bool show = false;
  };
  auto f = std::make_shared<Flags>();
  app->add_option("--model", f->model, "Model directory")->required();
  app->add_option("--adapter", f->adapter, "Adapter directory, applied live");
  app->add_option("--data", f->data, "JSONL of {\"messages\": [...]} ending with an assistant turn")->required();
  app->add_option("--label", f->label, "Name for this run in the output");
  app->add_option("--batch-size", f->batch_size, "Prompts generated together (default 16)");
  app->add_option("--max-examples", f->max_examples, "Score only the first N examples");
  app->add_flag("--show", f->show, "Print every answer next to the reference (stderr)");
  out.push_back({app, [f] {
    ModelSession s = open_session(f->model, f->adapter);
    s.require_tokenizer("evaluate");
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::string> references;
    std::vector<int64_t> budgets;
    std::vector<std::string> tasks;
    for_each_record(f->data, [&](const Record& r, int64_t /*line: for_each_record names it*/) {
      GLM4_CHECK(r.messages.size() >= 2 && r.messages.back().role == "assistant",
                 "evaluate needs a messages record ending with an assistant turn");
      if (f->max_examples > 0 && int64_t(prompts.size()) >= f->max_examples) return;
      std::vector<ChatMessage> context(r.messages.begin(), r.messages.end() - 1);
      prompts.push_back(s.render(context));
      references.push_back(trim(r.messages.back().content));
      tasks.push_back(r.task);
      budgets.push_back(int64_t(s.tokenizer->encode(references.back()).size()) + 8);
    });
    GLM4_CHECK(!prompts.empty(), "--data ", f->data, ": no examples");
    NoGradGuard no_grad;
    int64_t correct = 0;
    std::map<std::string, std::pair<int64_t, int64_t>> by_task;  // task -> (correct, examples)
    for (size_t at = 0; at < prompts.size(); at += size_t(f->batch_size)) {
      size_t end = std::min(prompts.size(), at + size_t(f->batch_size));
      std::vector<std::vector<int32_t>> batch(prompts.begin() + at, prompts.begin() + end);
      GenerationConfig g;
      g.stop_ids = s.stop_ids(true);
      g.max_tokens = int(*std::max_element(budgets.begin() + at, budgets.begin() + end));
      auto answers = generate_batch(*s.model, batch, g);
      for (size_t i = 0; i < answers.size(); ++i) {
        std::string answer = trim(s.tokenizer->decode(answers[i], true));
        bool ok = answer == references[at + i];
        correct += ok;
        if (!tasks[at + i].empty()) {
          by_task[tasks[at + i]].first += ok;
          by_task[tasks[at + i]].second += 1;
        }
        if (f->show)
          std::fprintf(stderr, "%s %s  |  expected: %s\n", ok ? "[ok]  " : "[miss]", answer.c_str(),
                       references[at + i].c_str());
      }
    }
    DatasetOptions o;
    o.mask_prompt = true;
    o.vocab_size = s.model->config.vocab_size;
    Dataset d = load_dataset(f->data, make_text_encoder(f->model), o);
    std::vector<std::vector<int32_t>> ids, labels;
    for (size_t i = 0; i < d.examples.size() && i < prompts.size(); ++i) {
      ids.push_back(d.examples[i].ids);
      labels.push_back(d.examples[i].labels);
    }
    PerplexityResult p = perplexity(*s.model, ids, labels, 8);
    nlohmann::json j{{"label", f->label.empty() ? (f->adapter.empty() ? "base" : "adapted") : f->label},
                     {"examples", prompts.size()},
                     {"exact_match", double(correct) / double(prompts.size())},
                     {"answer_loss", p.loss},
                     {"answer_tokens", p.tokens}};
    if (!by_task.empty()) {
      nlohmann::json t = nlohmann::json::object();
      for (const auto& [task, n] : by_task) t[task] = double(n.first) / double(n.second);
      j["exact_match_by_task"] = t;
    }
    std::printf("%s\n", j.dump().c_str());
  }});
}

}  // namespace glm4::cli
