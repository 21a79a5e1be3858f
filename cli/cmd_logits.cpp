// glm4 logits: one forward pass over a token sequence, writing the logits (and with
// --dump-layers every layer's hidden states) to a safetensors file, for checks against other
// implementations.
#include <cstdio>
#include <memory>

#include "autograd/node.h"
#include "cli/cli_common.h"
#include "cli/flag_groups.h"
#include "cli/model_session.h"
#include "io/safetensors.h"
#include "model/glm4_model.h"

namespace glm4::cli {

namespace {
struct LogitsFlags {
  ModelFlags model;
  AdapterFlags adapter;
  std::string tokens, text, out, compute = "auto";
  bool dump_layers = false, force = false;
};

void run_logits(const LogitsFlags& f) {
  GLM4_CHECK(!f.tokens.empty() || !f.text.empty(),
             "give the input as --tokens 1,2,3 or --text \"...\"");
  check_output_file(f.out, "--out", f.force);
  GLM4_CHECK(f.tokens.empty() || f.text.empty(), "give either --tokens or --text, not both");
  ModelSession s =
      open_session(f.model.dir, f.adapter.dir, f.compute, f.model.memory(),
                   f.text.empty() ? TokenizerNeed{} : TokenizerNeed{"--text", "--tokens"});
  const ModelConfig& c = s.model->config;
  std::vector<int32_t> ids = f.text.empty() ? parse_token_list(f.tokens, "--tokens", c.vocab_size)
                                            : s.encode_prompt(f.text);
  const Glm4Model* model = s.model.get();

  NoGradGuard no_grad;
  const int64_t T = int64_t(ids.size());
  ForwardContext ctx;
  ctx.batch = 1;
  ctx.seq = T;
  for (int64_t t = 0; t < T; ++t) ctx.positions.push_back(int32_t(t));
  std::vector<Tensor> layers;
  if (f.dump_layers) ctx.layer_outputs = &layers;
  Tensor hidden = model->forward_hidden(ids, ctx);  // [1, T, hidden]
  Tensor logits = model->logits(hidden, ctx);       // [1, T, vocab]

  std::vector<TensorToWrite> tensors;
  tensors.push_back(f32_tensor("logits", {T, c.vocab_size}, logits.data()));
  if (f.dump_layers) {
    for (size_t l = 0; l < layers.size(); ++l)
      tensors.push_back(
          f32_tensor("hidden." + std::to_string(l), {T, c.hidden_size}, layers[l].data()));
    tensors.push_back(f32_tensor("hidden.final", {T, c.hidden_size}, hidden.data()));
  }
  tensors.push_back({"input_ids", "I32", {T}, ids.data(), ids.size() * sizeof(int32_t)});
  with_flag("--out", f.out, [&] { write_safetensors(f.out, tensors); });
  std::printf("wrote %s: logits [%lld, %lld]%s\n", f.out.c_str(), static_cast<long long>(T),
              static_cast<long long>(c.vocab_size), f.dump_layers ? " and hidden states" : "");
}
}  // namespace

void add_logits_command(CLI::App& parent, std::vector<Command>& out) {
  auto f = std::make_shared<LogitsFlags>();
  CLI::App* sub = parent.add_subcommand(
      "logits", "Run one forward pass and write the logits (and hidden states) to safetensors");
  f->model.add(sub, "Model directory (config.json + safetensors)");
  auto* tokens = sub->add_option("--tokens", f->tokens, "Input token ids, comma-separated: 1,2,3");
  auto* text = sub->add_option("--text", f->text, "Input text, encoded with the model's tokenizer");
  tokens->excludes(text);
  sub->add_option("--out", f->out, "Output .safetensors file")->required();
  sub->add_flag("--force", f->force, "Replace --out when the file exists");
  f->adapter.add(sub);
  add_compute_flag(sub, f->compute);
  f->model.add_memory_flags(sub);
  sub->add_flag(
      "--dump-layers", f->dump_layers,
      "Also write hidden.N [T, hidden] after each decoder layer and hidden.final after the norm");
  sub->footer(
      "Writes logits [T, vocab] (F32) and input_ids [T] (I32).\n"
      "Example: glm4 logits --model models/tiny --tokens 1,2,3 --out logits.safetensors");
  out.push_back({sub, [f] { run_logits(*f); }});
}

}  // namespace glm4::cli
