// glm4 quantize: a model directory rewritten in mlx's affine format (4-bit groups of 64 by
// default), matrix by matrix as the files are written, with per-module --keep rules; the
// output loads in glm4 and in mlx-lm.
#include <cstdio>
#include <map>

#include "autograd/kernels/quantized_matrix.h"
#include "cli/cli_common.h"
#include "cli/flag_groups.h"
#include "model/glm4_model.h"
#include "model/quant_plan.h"
#include "model/save.h"

namespace glm4::cli {

namespace {
struct QuantizeFlags {
  ModelFlags model;
  std::string out, dtype, shard_size = "5GB";
  int bits = 4, group_size = 64;
  std::vector<std::string> keep;
  bool force = false;
};

void run_quantize(const QuantizeFlags& f) {
  GLM4_CHECK(quant_bits_supported(f.bits), "--bits ", f.bits,
             ": not supported (2, 3, 4, 5, 6 or 8)");
  GLM4_CHECK(quant_group_supported(f.group_size), "--group-size ", f.group_size,
             ": not supported (32, 64 or 128)");
  const QuantPlan plan = QuantPlan::parse({f.bits, f.group_size}, f.keep, "--keep");
  check_output_dir(f.out, "--out", f.force);
  auto model = with_flag("--model", f.model.dir,
                         [&] { return load_model(f.model.dir, FileResidency::kMapped); });
  const ModelConfig config = model->config;
  GLM4_CHECK(config.family != ModelConfig::Family::ChatGlm, "--model ", f.model.dir,
             ": quantized chatglm models are not supported (glm4 and glm are)");
  plan.check_every_rule_matches(quantizable_modules(*model), "--keep");
  SaveOptions save;
  save.dtype = f.dtype.empty() ? config.torch_dtype : parse_dtype_flag(f.dtype, "--dtype");
  save.max_shard_bytes = parse_size(f.shard_size, "--shard-size");
  save.progress_label = "quantize";
  std::map<std::string, int64_t> count;  // "4-bit/g64", "dense" -> modules
  int64_t matrix_params = 0, from_quantized = 0;
  double matrix_bits = 0;
  save.quantize = [&](const std::string& module, const Param& p) {
    const std::optional<QuantFormat> fmt = plan.format_for(module, p.shape[1]);
    const double n = double(shape_numel(p.shape));
    matrix_params += shape_numel(p.shape);
    if (p.frozen.is_quantized()) ++from_quantized;
    if (fmt) {
      ++count[std::to_string(fmt->bits) + "-bit/g" + std::to_string(fmt->group_size)];
      matrix_bits += n * (fmt->bits + 2.0 * 8 * dtype_size(save.dtype) / fmt->group_size);
    } else {
      ++count["dense"];
      matrix_bits += n * 8 * dtype_size(save.dtype);
    }
    return fmt;
  };
  with_flag("--out", f.out, [&] { save_model(*model, config, f.out, save); });
  copy_model_companions(f.model.dir, f.out, config);
  std::string summary;
  for (const auto& [what, n] : count)
    summary += (summary.empty() ? "" : ", ") + std::to_string(n) + " " + what;
  std::printf("wrote %s: matrices %s; %.3f bits per matrix weight, scales and vectors %s\n",
              f.out.c_str(), summary.c_str(),
              matrix_bits / double(std::max<int64_t>(1, matrix_params)), dtype_name(save.dtype));
  if (from_quantized > 0)
    std::printf(
        "note: %lld matrices of --model were already quantized; they were dequantized first, and "
        "quantizing them again adds its own rounding (it is not idempotent)\n",
        static_cast<long long>(from_quantized));
}
}  // namespace

void add_quantize_command(CLI::App& parent, std::vector<Command>& out) {
  auto f = std::make_shared<QuantizeFlags>();
  CLI::App* app =
      parent.add_subcommand("quantize", "Rewrite a model in mlx's affine quantized format");
  f->model.add(app, "Model directory (f32, bf16, f16 or already quantized)");
  app->add_option("--out", f->out, "Output model directory (must be missing or empty)")->required();
  app->add_option("--bits", f->bits, "Bits per weight: 2, 3, 4, 5, 6 or 8")->capture_default_str();
  app->add_option("--group-size", f->group_size,
                  "Columns sharing a scale and a bias: 32, 64 or 128")
      ->capture_default_str();
  app->add_option(
      "--keep", f->keep,
      "Per-module rule MODULE:BITS, MODULE:BITS/GROUP or MODULE:none (stays dense in --dtype); "
      "MODULE is a path or its last segments, e.g. lm_head:8, model.embed_tokens:8, down_proj:6, "
      "layers.0.mlp.down_proj:none. Repeatable; later rules win");
  app->add_option("--dtype", f->dtype,
                  "f32 | bf16 | f16: what the values are rounded to before quantizing, "
                  "and the dtype of scales, biases and vectors (default: the model's)");
  app->add_option("--shard-size", f->shard_size, "Largest safetensors shard (default 5GB)");
  app->add_flag("--force", f->force, "Write into a non-empty --out");
  app->footer(
      "A matrix whose in_features the group size does not divide stays dense (as mlx-lm does).\n"
      "config.json gets \"quantization\" and \"quantization_config\" as mlx-lm writes them.\n"
      "Example: glm4 quantize --model models/glm4-9b --out models/glm4-9b-q4 --bits 4 --keep "
      "lm_head:8");
  out.push_back({app, [f] { run_quantize(*f); }});
}

}  // namespace glm4::cli
