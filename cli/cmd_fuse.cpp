// glm4 fuse: merge an adapter into the base weights (W + scale * B A, in fp32, rounded once)
// and write a complete Hugging Face model directory; without --adapter it converts the dtype.
// glm4 perplexity: token-weighted loss and perplexity of a model on a JSONL data set.
#include <cstdio>
#include <filesystem>

#include "cli/cli_common.h"
#include "cli/model_session.h"
#include "infer/merge.h"
#include "infer/score.h"
#include "model/save.h"
#include "dataset/dataset.h"
#include "dataset/text_encoder.h"

namespace fs = std::filesystem;

namespace glm4::cli {

void add_fuse_command(CLI::App& parent, std::vector<Command>& out) {
  CLI::App* app = parent.add_subcommand("fuse", "Merge a LoRA adapter into the weights; write a model directory");
  struct Flags {
    std::string model, adapter, out, dtype, shard_size = "5GB";
    bool force = false;
  };
  auto f = std::make_shared<Flags>();
  app->add_option("--model", f->model, "Base model directory")->required();
  app->add_option("--adapter", f->adapter, "Adapter directory (PEFT or MLX); omit to only convert the dtype");
  app->add_option("--out", f->out, "Output model directory")->required();
  app->add_option("--dtype", f->dtype, "f32 | bf16 | f16 (default: the base model's)");
  app->add_option("--shard-size", f->shard_size, "Largest safetensors shard (default 5GB)");
  app->add_flag("--force", f->force, "Write into a non-empty --out");
  out.push_back({app, [f] {
    check_output_dir(f->out, "--out", f->force);
    size_t shard = parse_size(f->shard_size, "--shard-size");
    ModelSession s = open_session(f->model, f->adapter, "f32");
    DType dtype = f->dtype.empty() ? s.model->config.torch_dtype : parse_dtype_flag(f->dtype, "--dtype");
    int64_t merged = merge_adapters(*s.model, dtype);
    ModelConfig config = s.model->config;
    save_model(*s.model, config, f->out, dtype, shard);
    copy_model_companions(f->model, f->out, config);
    std::fprintf(stderr, "merged %lld adapted modules; wrote %s (%s)\n", (long long)merged, f->out.c_str(),
                 dtype_name(dtype));
  }});
}

void add_perplexity_command(CLI::App& parent, std::vector<Command>& out) {
  CLI::App* app = parent.add_subcommand("perplexity", "Token-weighted loss and perplexity on a JSONL file");
  struct Flags {
    std::string model, adapter, data, compute = "auto";
    int64_t batch_size = 4, max_seq_length = 2048;
    bool mask_prompt = false;
  };
  auto f = std::make_shared<Flags>();
  app->add_option("--model", f->model, "Model directory")->required();
  app->add_option("--adapter", f->adapter, "Adapter directory, applied live");
  app->add_option("--data", f->data, "JSONL file (text, prompt/completion, messages or input_ids records)")->required();
  app->add_option("--batch-size", f->batch_size, "Examples per forward pass (default 4)");
  app->add_option("--max-seq-length", f->max_seq_length, "Longer examples are truncated (default 2048)");
  app->add_flag("--mask-prompt", f->mask_prompt, "Score only completions / assistant turns");
  add_compute_flag(app, f->compute);
  out.push_back({app, [f] {
    GLM4_CHECK(f->batch_size > 0, "--batch-size must be positive, got ", f->batch_size);
    ModelSession s = open_session(f->model, f->adapter, f->compute);
    DatasetOptions o;
    o.mask_prompt = f->mask_prompt;
    o.max_seq_length = f->max_seq_length;
    o.vocab_size = s.model->config.vocab_size;
    Dataset d = with_flag("--data", f->data, [&] { return load_dataset(f->data, make_text_encoder(f->model), o); });
    LossScore r = score_loss(*s.model, d.examples, f->batch_size);
    std::printf("{\"loss\": %.6f, \"perplexity\": %.4f, \"tokens\": %lld, \"compute\": \"%s\"}\n", r.loss, r.perplexity,
                (long long)r.tokens, compute_dtype_name(s.compute.dtype));
  }});
}

}  // namespace glm4::cli
