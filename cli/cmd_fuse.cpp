// glm4 fuse: merge an adapter into the base weights (W + scale * B A, in fp32, rounded once)
// and write a complete Hugging Face model directory; without --adapter it converts the dtype.
// On a quantized base it re-quantizes and measures what survived (infer/merge_quantized.h), or
// with --dequantize writes the exact merge dense.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

#include "autograd/kernels/gemm.h"
#include "autograd/kernels/quant_linear.h"
#include "base/strings.h"
#include "cli/cli_common.h"
#include "cli/flag_groups.h"
#include "cli/model_session.h"
#include "dataset/dataset.h"
#include "dataset/text_encoder.h"
#include "infer/merge.h"
#include "infer/merge_quantized.h"
#include "infer/score.h"
#include "model/config.h"
#include "model/dora.h"
#include "model/save.h"

namespace fs = std::filesystem;

namespace glm4::cli {

namespace {

struct FuseFlags {
  ModelFlags model;
  AdapterFlags adapter;
  DataFlags data{4};  // optional: the loss before and after
  std::string out, dtype, shard_size = "5GB";
  bool force = false, dequantize = false, keep_bits = false;
  double min_kept = 0.5;
  std::string raise_bits = "5,6,8";
  int64_t max_seq_length = 2048;
};

// --raise-bits "5,6,8": widths in increasing order, each one mlx's affine format has.
std::vector<int> parse_raise_bits(const std::string& text) {
  std::vector<int> widths;
  for (const std::string& item : split_commas(text)) {
    int bits = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), bits);
    GLM4_CHECK(ec == std::errc() && end == item.data() + item.size(), "--raise-bits ", text, ": \"",
               item, "\" is not a number of bits");
    GLM4_CHECK(bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8, "--raise-bits ", text,
               ": ", bits, " bits is not a width of the format (3, 4, 5, 6 or 8)");
    GLM4_CHECK(widths.empty() || bits > widths.back(), "--raise-bits ", text,
               ": give the widths in increasing order");
    widths.push_back(bits);
  }
  GLM4_CHECK(!widths.empty(), "--raise-bits: give at least one width");
  return widths;
}

bool has_quantized_weights(Glm4Model& model) {
  bool any = false;
  model.visit(
      [&](const std::string&, Param& p) { any |= !p.value.defined() && p.frozen.is_quantized(); });
  return any;
}

// Every adapter moved out of the model (so it scores, and saves, as the base), by module path.
std::map<std::string, std::unique_ptr<LoraWeights>> take_adapters(Glm4Model& model) {
  std::map<std::string, std::unique_ptr<LoraWeights>> taken;
  model.visit_linears([&](const LinearSite& site, Linear& l) {
    if (l.lora) taken[site.path] = std::move(l.lora);
  });
  return taken;
}
void put_adapters(Glm4Model& model, std::map<std::string, std::unique_ptr<LoraWeights>>& taken) {
  model.visit_linears([&](const LinearSite& site, Linear& l) {
    if (auto it = taken.find(site.path); it != taken.end()) l.lora = std::move(it->second);
  });
  taken.clear();
}

// W + scale * B A (DoRA-scaled) in fp32 for one linear's weight.
Weight merged_weight(const Param& weight, const LoraWeights& lora) {
  Tensor w = adapted_weight(weight, lora);
  return Weight::copy_of(DType::F32, w.data(), weight.shape[0], weight.shape[1]);
}

void run_fuse(const FuseFlags& f) {
  check_output_dir(f.out, "--out", f.force);
  GLM4_CHECK(f.min_kept > 0 && f.min_kept <= 1, "--min-kept ", f.min_kept,
             ": expected a share in (0, 1]");
  const std::vector<int> raise_bits = parse_raise_bits(f.raise_bits);
  SaveOptions save;
  save.max_shard_bytes = parse_size(f.shard_size, "--shard-size");
  ModelSession s = open_without_weights(f.model.dir, f.adapter.dir);
  std::optional<Dataset> data;  // --data: the loss before and after, on the user's examples
  if (!f.data.file.empty()) {
    DatasetOptions o;
    o.max_seq_length = f.max_seq_length;
    o.vocab_size = with_flag("--model", f.model.dir,
                             [&] { return load_model_config(f.model.dir).vocab_size; });
    data = with_flag("--data", f.data.file,
                     [&] { return load_dataset(f.data.file, make_text_encoder(f.model.dir), o); });
  }
  load_weights(s, "f32", FileResidency::kMapped);
  Glm4Model& model = *s.model;
  const bool quantized = has_quantized_weights(model);
  save.dtype = f.dtype.empty() ? model.config.torch_dtype : parse_dtype_flag(f.dtype, "--dtype");
  save.progress_label = "fuse";

  std::optional<LossScore> base_loss, adapter_loss;
  if (data) {
    adapter_loss = score_loss(model, data->examples, f.data.batch_size);
    auto taken = take_adapters(model);
    base_loss = score_loss(model, data->examples, f.data.batch_size);
    put_adapters(model, taken);
  }

  const ModelConfig config = model.config;
  std::string what;
  if (quantized && !f.dequantize && !f.adapter.dir.empty()) {
    RequantizeOptions o;
    o.dtype = save.dtype;
    o.min_kept = f.min_kept;
    o.keep_bits = f.keep_bits;
    o.raise_bits = raise_bits;
    std::vector<ModuleMerge> merges = merge_requantized(model, o);
    std::fputs(describe_merge(merges).c_str(), stderr);
    const auto slow = std::count_if(merges.begin(), merges.end(), [](const ModuleMerge& m) {
      return m.written && m.written->bits != m.base.bits && !quant_int8_decodes(m.written->bits);
    });
    if (slow > 0 && quant_int8_available())
      std::fprintf(stderr,
                   "note: %lld modules went to widths this CPU decodes on glm4's fp32 kernels "
                   "(5 and 6 bits need AVX512-VBMI for the int8 ones), about 6x slower a byte; "
                   "--raise-bits 8 keeps them on the int8 kernels (larger files)\n",
                   (long long)slow);
    what = "re-quantized";
  } else if (quantized) {  // --dequantize, or no adapter: each module merged as it is written
    save.dequantize = f.dequantize;
    auto adapters =
        std::make_shared<std::map<std::string, std::unique_ptr<LoraWeights>>>(take_adapters(model));
    save.source = [adapters](const std::string& name, const Param& p) {
      auto it = adapters->find(name.substr(0, name.size() - 7));
      if (p.is_matrix() && it != adapters->end()) return merged_weight(p, *it->second);
      if (p.value.defined())
        return Weight::view(DType::F32, p.value.data(), p.shape[0], p.is_matrix() ? p.shape[1] : 1,
                            p.value.impl_ptr());
      return p.frozen;
    };
    what = f.dequantize ? "dequantized" : "kept quantized";
  } else {
    merge_adapters(model, save.dtype);
    what = "dense";
  }
  save_model(model, config, f.out, save);
  copy_model_companions(f.model.dir, f.out, config);
  std::fprintf(stderr, "wrote %s (%s, %s)\n", f.out.c_str(), what.c_str(), dtype_name(save.dtype));
  if (data) {
    auto written = load_model(f.out, FileResidency::kMapped);
    const LossScore fused = score_loss(*written, data->examples, f.data.batch_size);
    const double gain = base_loss->loss - adapter_loss->loss;
    std::printf(
        "{\"base_loss\": %.6f, \"adapter_loss\": %.6f, \"fused_loss\": %.6f, "
        "\"gain_kept\": %.4f, \"tokens\": %lld}\n",
        base_loss->loss, adapter_loss->loss, fused.loss,
        gain != 0 ? (base_loss->loss - fused.loss) / gain : 1.0, (long long)fused.tokens);
  }
}

}  // namespace

void add_fuse_command(CLI::App& parent, std::vector<Command>& out) {
  CLI::App* app = parent.add_subcommand(
      "fuse", "Merge a LoRA adapter into the weights; write a model directory");
  auto f = std::make_shared<FuseFlags>();
  f->model.add(app, "Base model directory");
  f->adapter.add(app, " to merge in; omit to only convert the dtype");
  app->add_option("--out", f->out, "Output model directory")->required();
  app->add_option("--dtype", f->dtype, "f32 | bf16 | f16 (default: the base model's)");
  app->add_option("--shard-size", f->shard_size, "Largest safetensors shard (default 5GB)");
  app->add_flag("--force", f->force, "Write into a non-empty --out");
  app->add_flag("--dequantize", f->dequantize,
                "Quantized base: write every matrix dense in --dtype (the exact merge)");
  app->add_flag(
      "--keep-bits", f->keep_bits,
      "Quantized base: re-quantize merged modules at the base's bits even where that erases "
      "the adapter's delta (measured and reported as LOSSY)");
  app->add_option("--min-kept", f->min_kept,
                  "Quantized base: share of a module's delta that must survive re-quantization, "
                  "else it gets more bits or stays dense (default 0.5)");
  app->add_option("--raise-bits", f->raise_bits,
                  "Quantized base: the wider widths a module whose delta would vanish is tried "
                  "at, in order (default 5,6,8; 8 keeps every module on glm4's int8 kernels on "
                  "CPUs without AVX512-VBMI, where 5 and 6 bits decode about 6x slower a byte)");
  f->data.add(
      app, "JSONL file: report the loss of the base, the live adapter and the written model on it",
      "With --data: examples per forward pass");
  app->add_option("--max-seq-length", f->max_seq_length,
                  "With --data: longer examples are truncated (default 2048)");
  app->footer(
      "On a quantized base the merged modules are re-quantized and measured: each keeps its base\n"
      "format when at least --min-kept of its delta survives, else it is raised to the first of\n"
      "--raise-bits (default 5,6,8) that keeps it,\n"
      "else written dense; --keep-bits keeps the base format anyway, --dequantize writes dense.");
  out.push_back({app, [f] { run_fuse(*f); }});
}

}  // namespace glm4::cli
