// glm4 init: a new model directory with random weights (Hugging Face's initialisation) from a
// config.json-style file, reproducible from --seed.
#include <cstdio>
#include <memory>

#include "cli/cli_common.h"
#include "model/config.h"
#include "model/glm4_model.h"
#include "model/save.h"

namespace glm4::cli {

namespace {
struct InitOptions {
  std::string config, out, dtype = "f32", shard_size = "5GB";
  uint64_t seed = 0;
  bool force = false;
};

void run_init(const InitOptions& o) {
  DType dtype = parse_dtype_flag(o.dtype, "--dtype");
  size_t shard = parse_size(o.shard_size, "--shard-size");
  ModelConfig config = with_flag("--config", o.config, [&] { return load_model_config(o.config); });
  check_output_dir(o.out, "--out", o.force);
  Glm4Model model(config);
  init_random(model, o.seed, dtype);
  int64_t params = 0;
  model.visit([&](const std::string&, Param& p) { params += shape_numel(p.shape); });
  with_flag("--out", o.out, [&] { save_model(model, o.out, dtype, shard); });
  std::printf("wrote %s: %s model, %lld parameters, %s, seed %llu\n", o.out.c_str(),
              family_name(config.family), static_cast<long long>(params), dtype_name(dtype),
              static_cast<unsigned long long>(o.seed));
}
}  // namespace

void add_init_command(CLI::App& parent, std::vector<Command>& out) {
  auto o = std::make_shared<InitOptions>();
  CLI::App* sub = parent.add_subcommand(
      "init", "Create a model directory with random weights from a config file");
  sub->add_option("--config", o->config,
                  "Model config: a Hugging Face config.json (glm4, glm or chatglm), e.g. configs/tiny.json")
      ->required();
  sub->add_option("--out", o->out, "Directory to write (must be missing or empty)")->required();
  sub->add_option("--seed", o->seed, "Random seed; the same seed gives the same weights everywhere")
      ->capture_default_str();
  sub->add_option("--dtype", o->dtype, "Weight dtype: f32, bf16 or f16")->capture_default_str();
  sub->add_option("--shard-size", o->shard_size,
                  "Largest weight file, e.g. 2GB, 500MB, 1GiB; 0 = one file")
      ->capture_default_str();
  sub->add_flag("--force", o->force, "Write into a non-empty --out directory");
  sub->footer("Example: glm4 init --config configs/tiny.json --out models/tiny --seed 1");
  out.push_back({sub, [o] { run_init(*o); }});
}

}  // namespace glm4::cli
