// glm4 export: files for other runtimes. `gguf` writes a model (an adapter merged first) as one
// GGUF file for llama.cpp; `gguf-lora` writes an adapter in llama.cpp's LoRA adapter format.
#include <cstdio>
#include <memory>

#include "cli/cli_common.h"
#include "cli/flag_groups.h"
#include "export/gguf_export.h"
#include "export/gguf_lora_export.h"
#include "export/gguf_tensor_map.h"
#include "infer/merge.h"
#include "model/adapter/adapter_files.h"
#include "model/adapter/adapter_io.h"

namespace fs = std::filesystem;

namespace glm4::cli {
namespace {

struct ExportFlags {
  ModelFlags model;
  AdapterFlags adapter;
  std::string out, type = "f32";
  bool force = false;
};

GgmlType parse_type_flag(const std::string& text, bool adapter) {
  GgmlType t;
  const bool ok = parse_ggml_type(text, &t) &&
                  (!adapter || t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16);
  GLM4_CHECK(ok, "--type ", text, ": unknown type; expected ",
             adapter ? "f32, f16 or bf16" : "f32, f16, bf16, q8_0 or q4_0");
  return t;
}

void print_notes(const std::vector<std::string>& notes) {
  for (const std::string& n : notes) std::fprintf(stderr, "note: %s\n", n.c_str());
}

void run_gguf(const ExportFlags& f) {
  const GgmlType type = parse_type_flag(f.type, false);
  check_output_file(f.out, "--out", f.force);
  if (!f.adapter.dir.empty())  // its files before the model's
    with_flag("--adapter", f.adapter.dir, [&] { read_adapter_info(f.adapter.dir); });
  std::unique_ptr<Glm4Model> model = with_flag(
      "--model", f.model.dir, [&] { return load_model(f.model.dir, FileResidency::kMapped); });
  if (!f.adapter.dir.empty()) {
    const std::string warning = with_flag("--adapter", f.adapter.dir, [&] {
      return load_adapter(*model, f.adapter.dir, f.model.dir);
    });
    if (!warning.empty()) std::fprintf(stderr, "warning: %s\n", warning.c_str());
    const int64_t merged = merge_adapters(*model, DType::F32);  // one rounding: to --type, below
    std::fprintf(stderr, "merged %lld adapted modules\n", static_cast<long long>(merged));
  }
  const GgufExportResult r = with_flag(
      "--out", f.out, [&] { return export_gguf_model(*model, f.model.dir, f.out, type); });
  print_notes(r.notes);
  std::printf("wrote %s: %s, %lld tensors, %lld parameters, %s\n", f.out.c_str(), r.arch.c_str(),
              static_cast<long long>(r.tensors), static_cast<long long>(r.parameters),
              f.type.c_str());
}

void run_gguf_lora(const ExportFlags& f) {
  const GgmlType type = parse_type_flag(f.type, true);
  check_output_file(f.out, "--out", f.force);
  const ModelConfig config =
      with_flag("--model", f.model.dir, [&] { return load_model_config(f.model.dir); });
  AdapterFile adapter =
      with_flag("--adapter", f.adapter.dir, [&] { return read_adapter_file(f.adapter.dir); });
  GLM4_CHECK(
      !adapter.info.lora.dora, "--adapter ", f.adapter.dir,
      ": a DoRA adapter has no llama.cpp LoRA form (its ",
      "magnitude rescales whole rows); merge it instead: glm4 export gguf --model M --adapter A");
  if (config.family == ModelConfig::Family::ChatGlm) adapter.qkv_rows = qkv_rows_of(config);
  with_flag("--adapter", f.adapter.dir,
            [&] { split_fused_qkv(adapter, "adapter " + f.adapter.dir); });
  std::vector<GgufLoraModule> modules;
  for (const auto& [path, m] : adapter.modules) {
    GLM4_CHECK(m.a_shape.size() == 2 && m.b_shape.size() == 2, "--adapter ", f.adapter.dir,
               ": module ", path, " has A or B that is not a matrix");
    modules.push_back({path, m.a_shape[0], m.a_shape[1], m.b_shape[0], m.a, m.b});
  }
  const std::string name = fs::weakly_canonical(fs::path(f.adapter.dir)).filename().string();
  const GgufLoraExportResult r = with_flag("--adapter", f.adapter.dir, [&] {
    return export_gguf_lora(config, modules, adapter.info.scale, name, f.out, type);
  });
  print_notes(r.notes);
  std::printf("wrote %s: LoRA for %s, %lld tensors, alpha %g, %s\n", f.out.c_str(),
              gguf_arch_name(config), static_cast<long long>(r.tensors), r.alpha, f.type.c_str());
}

}  // namespace

void add_export_command(CLI::App& parent, std::vector<Command>& out) {
  CLI::App* exp =
      parent.add_subcommand("export", "Write files for other runtimes (GGUF for llama.cpp)");
  exp->require_subcommand(1);

  auto g = std::make_shared<ExportFlags>();
  CLI::App* gguf = exp->add_subcommand("gguf", "Write the model as one GGUF file for llama.cpp");
  g->model.add(gguf, "Model directory (config.json, safetensors, tokenizer)");
  g->adapter.add(gguf, " to merge in first");
  gguf->add_option("--out", g->out, "GGUF file to write")->required();
  gguf->add_option("--type", g->type,
                   "f32 | f16 | bf16 | q8_0 | q4_0 for the matrices (default f32)");
  gguf->add_flag("--force", g->force, "Replace --out when the file exists");
  gguf->footer(
      "Architecture glm4 (GLM-4-0414), glm4moe (GLM-4.5/4.6/4.7: routed experts stacked, MTP\n"
      "layers left out) or chatglm (glm-4-9b-chat, glm-4-9b-chat-hf, ChatGLM2/3), tensor names "
      "and\n"
      "metadata as llama.cpp's convert_hf_to_gguf.py writes them. Norms, biases and the MoE "
      "router\n"
      "stay f32; a matrix whose rows are not a multiple of 32 is written f16 when q8_0/q4_0 is "
      "asked.\n"
      "Example: glm4 export gguf --model ~/GLM-4-9B-0414 --out glm4-9b-q8_0.gguf --type q8_0");
  out.push_back({gguf, [g] { run_gguf(*g); }});

  auto l = std::make_shared<ExportFlags>();
  CLI::App* lora =
      exp->add_subcommand("gguf-lora", "Write a LoRA adapter in llama.cpp's GGUF adapter format");
  l->model.add(lora, "Base model directory (its config.json is read)");
  l->adapter.add(lora, "")->required();
  lora->add_option("--out", l->out, "GGUF file to write")->required();
  lora->add_option("--type", l->type, "f32 | f16 | bf16 (default f32)");
  lora->add_flag("--force", l->force, "Replace --out when the file exists");
  lora->footer("Use with llama.cpp: llama-cli -m base.gguf --lora adapter.gguf");
  out.push_back({lora, [l] { run_gguf_lora(*l); }});
}

}  // namespace glm4::cli
