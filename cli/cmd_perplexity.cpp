// glm4 perplexity: token-weighted loss and perplexity of a model on a JSONL data set.
#include <cstdio>

#include "cli/cli_common.h"
#include "cli/flag_groups.h"
#include "cli/model_session.h"
#include "dataset/dataset.h"
#include "dataset/records.h"
#include "dataset/text_encoder.h"
#include "infer/score.h"
#include "model/config.h"

namespace glm4::cli {

namespace {
struct PerplexityFlags {
  ModelFlags model;
  AdapterFlags adapter;
  DataFlags data{4};
  std::string compute = "auto";
  int64_t max_seq_length = 2048;
  bool mask_prompt = false;
};

void run_perplexity(const PerplexityFlags& f) {
  f.data.check_batch_size();
  ModelSession s = open_without_weights(f.model.dir, f.adapter.dir);
  DatasetOptions o;
  o.mask_prompt = f.mask_prompt;
  o.max_seq_length = f.max_seq_length;
  o.vocab_size =
      with_flag("--model", f.model.dir, [&] { return load_model_config(f.model.dir).vocab_size; });
  Dataset d = with_flag("--data", f.data.file, [&] {
    return load_dataset(resolve_eval_path(f.data.file), make_text_encoder(f.model.dir), o);
  });
  load_weights(s, f.compute, f.model.memory());
  LossScore r = score_loss(*s.model, d.examples, f.data.batch_size);
  print_json({{"loss", r.loss},
              {"perplexity", r.perplexity},
              {"tokens", r.tokens},
              {"compute", compute_dtype_name(s.compute.dtype)}});
}
}  // namespace

void add_perplexity_command(CLI::App& parent, std::vector<Command>& out) {
  CLI::App* app =
      parent.add_subcommand("perplexity", "Token-weighted loss and perplexity on JSONL data");
  auto f = std::make_shared<PerplexityFlags>();
  f->model.add(app);
  f->adapter.add(app);
  f->data
      .add(app,
           "JSONL file (text, prompt/completion, messages or input_ids records), or a data "
           "folder: its test.jsonl, else valid.jsonl",
           "Examples per forward pass")
      ->required();
  app->add_option("--max-seq-length", f->max_seq_length,
                  "Longer examples are truncated (default 2048)");
  app->add_flag("--mask-prompt", f->mask_prompt, "Score only completions / assistant turns");
  add_compute_flag(app, f->compute);
  f->model.add_memory_flags(app);
  out.push_back({app, [f] { run_perplexity(*f); }});
}

}  // namespace glm4::cli
