// glm4 init: a new model directory with random weights (Hugging Face's initialisation) from a
// config.json-style file, reproducible from --seed; with --bits straight in mlx's affine format,
// one generated matrix at a time (GLM-4-32B at 4 bits without its 64 GB bf16 form).
#include <cstdio>
#include <memory>

#include "cli/cli_common.h"
#include "model/config.h"
#include "model/glm4_model.h"
#include "model/quant_plan.h"
#include "model/save.h"

namespace glm4::cli {

namespace {
struct InitOptions {
  std::string config, out, dtype = "f32", shard_size = "5GB";
  uint64_t seed = 0;
  int bits = 0, group_size = 64;
  std::vector<std::string> keep;
  bool force = false;
};

void run_init(const InitOptions& o) {
  DType dtype = parse_dtype_flag(o.dtype, "--dtype");
  size_t shard = parse_size(o.shard_size, "--shard-size");
  ModelConfig config = with_flag("--config", o.config, [&] { return load_model_config(o.config); });
  check_output_dir(o.out, "--out", o.force);
  Glm4Model model(config);
  int64_t params = 0;
  model.visit([&](const std::string&, Param& p) { params += shape_numel(p.shape); });
  if (o.bits == 0) {
    GLM4_CHECK(o.keep.empty(), "--keep needs --bits");
    init_random(model, o.seed, dtype);
    with_flag("--out", o.out, [&] { save_model(model, o.out, dtype, shard); });
  } else {
    // Each matrix is generated (the values init_random gives it, in --dtype) and quantized when
    // the writer reaches it: the same bits as init followed by glm4 quantize.
    const QuantPlan plan = QuantPlan::parse({o.bits, o.group_size}, o.keep, "--keep");
    GLM4_CHECK(config.family != ModelConfig::Family::ChatGlm, "--bits: quantized chatglm models are not supported");
    SaveOptions save;
    save.dtype = dtype;
    save.max_shard_bytes = shard;
    save.progress_label = "init";
    save.quantize = [&](const std::string& module, const Param& p) { return plan.format_for(module, p.shape[1]); };
    save.source = [&](const std::string& name, const Param& p) {
      return random_param(config, o.seed, name, p.shape, dtype);
    };
    with_flag("--out", o.out, [&] { save_model(model, config, o.out, save); });
    write_generation_config(config, o.out);
  }
  std::printf("wrote %s: %s model, %lld parameters, %s%s, seed %llu\n", o.out.c_str(),
              family_name(config.family), static_cast<long long>(params), dtype_name(dtype),
              o.bits ? (", " + std::to_string(o.bits) + "-bit affine groups of " + std::to_string(o.group_size)).c_str() : "",
              static_cast<unsigned long long>(o.seed));
}
}  // namespace

void add_init_command(CLI::App& parent, std::vector<Command>& out) {
  auto o = std::make_shared<InitOptions>();
  CLI::App* sub = parent.add_subcommand(
      "init", "Create a model directory with random weights from a config file");
  sub->add_option("--config", o->config,
                  "Model config: a Hugging Face config.json (glm4, glm, chatglm or glm4_moe), e.g. configs/tiny.json")
      ->required();
  sub->add_option("--out", o->out, "Directory to write (must be missing or empty)")->required();
  sub->add_option("--seed", o->seed, "Random seed; the same seed gives the same weights everywhere")
      ->capture_default_str();
  sub->add_option("--dtype", o->dtype, "Weight dtype: f32, bf16 or f16 (with --bits: of the scales, biases and vectors)")
      ->capture_default_str();
  sub->add_option("--bits", o->bits, "Write the matrices quantized (mlx affine): 2, 3, 4, 5, 6 or 8 bits");
  sub->add_option("--group-size", o->group_size, "With --bits: columns per scale and bias (32, 64, 128)")
      ->capture_default_str();
  sub->add_option("--keep", o->keep, "With --bits: MODULE:BITS[/GROUP] or MODULE:none, e.g. lm_head:8 (repeatable; see glm4 quantize --help)");
  sub->add_option("--shard-size", o->shard_size,
                  "Largest weight file, e.g. 2GB, 500MB, 1GiB; 0 = one file")
      ->capture_default_str();
  sub->add_flag("--force", o->force, "Write into a non-empty --out directory");
  sub->footer("Example: glm4 init --config configs/tiny.json --out models/tiny --seed 1\n"
              "         glm4 init --config configs/glm-4-32b-0414.json --out models/32b-q4 --dtype bf16 --bits 4");
  out.push_back({sub, [o] { run_init(*o); }});
}

}  // namespace glm4::cli
