// glm4 adapter: LoRA adapter files. `convert` rewrites an adapter between the PEFT and MLX
// layouts without loading the base model.
#include <cstdio>
#include <memory>

#include "cli/cli_common.h"
#include "cli/flag_groups.h"
#include "model/adapter/adapter_io.h"

namespace glm4::cli {

namespace {
struct AdapterConvertFlags {
  std::string in, out, to;
  ModelFlags model;  // optional: only writing MLX needs it
};

void run_adapter_convert(const AdapterConvertFlags& f) {
  with_flag("--to", f.to, [&] { return check_adapter_format(f.to); });
  AdapterInfo info = with_flag("--in", f.in, [&] { return read_adapter_info(f.in); });
  with_flag("--out", f.out, [&] { convert_adapter(f.in, f.out, f.to, f.model.dir); });
  std::printf("wrote %s: %s adapter from %s (%s), rank %lld, targets %zu\n", f.out.c_str(),
              f.to.c_str(), f.in.c_str(), info.format.c_str(),
              static_cast<long long>(info.lora.rank), info.lora.targets.size());
}
}  // namespace

void add_adapter_command(CLI::App& parent, std::vector<Command>& out) {
  CLI::App* adapter = parent.add_subcommand("adapter", "LoRA adapter files (PEFT and MLX layouts)");
  adapter->require_subcommand(1);
  auto f = std::make_shared<AdapterConvertFlags>();
  CLI::App* convert = adapter->add_subcommand(
      "convert", "Rewrite an adapter in the PEFT or MLX layout (no base model needed)");
  convert->add_option("--in", f->in, "Adapter directory to read (layout detected from its files)")
      ->required();
  convert->add_option("--out", f->out, "Adapter directory to write")->required();
  convert->add_option("--to", f->to, "Layout to write: peft or mlx")->required();
  f->model
      .add(convert,
           "Base model directory; needed when writing MLX to tell whether a PEFT adapter's "
           "layers_to_transform are the last layers, and to split a ChatGLM query_key_value "
           "adapter into q/k/v")
      ->required(false);
  convert->footer(
      "PEFT: adapter_model.safetensors (lora_A [r, in], lora_B [out, r]) + adapter_config.json.\n"
      "MLX:  adapters.safetensors (lora_a [in, r], lora_b [r, out]) + adapter_config.json;\n"
      "      its scale is absolute: lora_alpha = scale * r.\n"
      "DoRA: PEFT lora_magnitude_vector + use_dora; MLX m + fine_tune_type dora.\n"
      "ChatGLM: PEFT keys transformer.encoder.layers.N.self_attention.query_key_value (one A over "
      "q|k|v);\n"
      "      MLX writes q_proj/k_proj/v_proj with the same lora_a, and converts back only when "
      "they share it.\n"
      "Example: glm4 adapter convert --in adapters/peft --out adapters/mlx --to mlx");
  out.push_back({convert, [f] { run_adapter_convert(*f); }});
}

}  // namespace glm4::cli
