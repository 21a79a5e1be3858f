// glm4 init: a new model directory with random weights (Hugging Face's initialisation) from a
// config.json-style file, reproducible from --seed, written one generated matrix at a time; with
// --bits straight in mlx's affine format.
#include <cstdio>
#include <memory>

#include "cli/cli_common.h"
#include "model/config.h"
#include "model/glm4_model.h"
#include "model/quant_plan.h"
#include "model/save.h"

namespace glm4::cli {

namespace {
struct InitFlags {
  std::string config, out, dtype = "f32", shard_size = "5GB";
  uint64_t seed = 0;
  int bits = 0, group_size = 64;
  std::vector<std::string> keep;
  bool force = false;
};

void run_init(const InitFlags& f) {
  DType dtype = parse_dtype_flag(f.dtype, "--dtype");
  size_t shard = parse_size(f.shard_size, "--shard-size");
  ModelConfig config = with_flag("--config", f.config, [&] { return load_model_config(f.config); });
  check_output_dir(f.out, "--out", f.force);
  Glm4Model model(config);
  int64_t params = 0;
  model.visit([&](const std::string&, Param& p) { params += shape_numel(p.shape); });
  // Each matrix is generated (the values init_random gives it, in --dtype) when the writer
  // reaches it, and with --bits quantized then: the same bits as init followed by glm4 quantize,
  // and never the whole model in memory (GLM-4-32B without its 64 GB bf16 form).
  SaveOptions save;
  save.dtype = dtype;
  save.max_shard_bytes = shard;
  save.progress_label = "init";
  save.source = [&](const std::string& name, const Param& p) {
    return random_param(config, f.seed, name, p.shape, dtype);
  };
  if (f.bits == 0) {
    GLM4_CHECK(f.keep.empty(), "--keep needs --bits");
  } else {
    const QuantPlan plan = QuantPlan::parse({f.bits, f.group_size}, f.keep, "--keep");
    GLM4_CHECK(config.family != ModelConfig::Family::ChatGlm,
               "--bits: quantized chatglm models are not supported");
    plan.check_every_rule_matches(quantizable_modules(model), "--keep");
    save.quantize = [plan](const std::string& module, const Param& p) {
      return plan.format_for(module, p.shape[1]);
    };
  }
  with_flag("--out", f.out, [&] { save_model(model, config, f.out, save); });
  write_generation_config(config, f.out);
  std::printf("wrote %s: %s model, %lld parameters, %s%s, seed %llu\n", f.out.c_str(),
              family_name(config.family), static_cast<long long>(params), dtype_name(dtype),
              f.bits ? (", " + std::to_string(f.bits) + "-bit affine groups of " +
                        std::to_string(f.group_size))
                           .c_str()
                     : "",
              static_cast<unsigned long long>(f.seed));
}
}  // namespace

void add_init_command(CLI::App& parent, std::vector<Command>& out) {
  auto f = std::make_shared<InitFlags>();
  CLI::App* sub = parent.add_subcommand(
      "init", "Create a model directory with random weights from a config file");
  sub->add_option("--config", f->config,
                  "Model config: a Hugging Face config.json (glm4, glm, chatglm, glm4_moe or "
                  "glm4_moe_lite), e.g. "
                  "configs/tiny.json")
      ->required();
  sub->add_option("--out", f->out, "Directory to write (must be missing or empty)")->required();
  sub->add_option("--seed", f->seed, "Random seed; the same seed gives the same weights everywhere")
      ->capture_default_str();
  sub->add_option("--dtype", f->dtype,
                  "Weight dtype: f32, bf16 or f16 (with --bits: of the scales, biases and vectors)")
      ->capture_default_str();
  sub->add_option("--bits", f->bits,
                  "Write the matrices quantized (mlx affine): 2, 3, 4, 5, 6 or 8 bits");
  sub->add_option("--group-size", f->group_size,
                  "With --bits: columns per scale and bias (32, 64, 128)")
      ->capture_default_str();
  sub->add_option("--keep", f->keep,
                  "With --bits: MODULE:BITS[/GROUP] or MODULE:none, e.g. lm_head:8 (repeatable; "
                  "see glm4 quantize --help)");
  sub->add_option("--shard-size", f->shard_size,
                  "Largest weight file, e.g. 2GB, 500MB, 1GiB; 0 = one file")
      ->capture_default_str();
  sub->add_flag("--force", f->force, "Write into a non-empty --out directory");
  sub->footer(
      "Example: glm4 init --config configs/tiny.json --out models/tiny --seed 1\n"
      "         glm4 init --config configs/glm-4-32b-0414.json --out models/32b-q4 --dtype bf16 "
      "--bits 4");
  out.push_back({sub, [f] { run_init(*f); }});
}

}  // namespace glm4::cli
