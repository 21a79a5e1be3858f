// Loading a model directory: a strict name walk over the parameter visitor. Matrices stay in
// their stored form as zero-copy views of the files' bytes in memory (dense dtypes, or mlx's affine
// groups when config.json's quantization and the files say so; mlx-lm's stacked glm4_moe experts
// as row ranges of their switch_mlp tensors); vectors are widened to fp32. mlx-lm's glm4_moe_lite
// split of kv_b_proj (embed_q / unembed_out) is the one matrix rebuilt into an owned copy, and
// the halves' memory is given back.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>

#include "base/check.h"
#include "base/memory.h"
#include "io/model_files.h"
#include "io/quantized_tensors.h"
#include "model/glm4_model.h"
#include "model/key_layout.h"
#include "model/load_file_tensors.h"
#include "model/load_kv_b_split.h"

namespace glm4 {

namespace {
std::string join_sorted(std::vector<std::string> keys, size_t limit = 50) {
  std::sort(keys.begin(), keys.end());
  std::string out;
  for (size_t i = 0; i < keys.size() && i < limit; ++i) out += "\n  " + keys[i];
  if (keys.size() > limit) out += "\n  ... and " + std::to_string(keys.size() - limit) + " more";
  return out;
}

void load_param(const std::string& name, Param& p, const FileSlice& src, const TensorInfo& t,
                std::shared_ptr<const void> owner, const std::string& dir) {
  Shape expected = p.shape;
  if (src.total_rows >= 0) expected[0] = src.total_rows;
  if (!src.file_shape.empty()) expected = src.file_shape;
  const DType dtype = dense_tensor_dtype(t, expected, dir);
  int64_t rows = p.shape[0], cols = p.shape.size() == 2 ? p.shape[1] : 1;
  const std::byte* data = t.data + size_t(src.row_begin * cols) * dtype_size(dtype);
  bool aligned = reinterpret_cast<uintptr_t>(data) % dtype_size(dtype) == 0;
  p.assign(aligned ? Weight::view(dtype, data, rows, cols, std::move(owner))
                   : Weight::copy_of(dtype, data, rows, cols));
}

// The files a quantized module's three tensors live in (shards may split them).
struct Owners {
  std::vector<std::shared_ptr<const void>> files;
};

// How the matrix `module` is stored: its format when quantized, nullopt when dense. An override
// in config.json decides; without one, the presence of MODULE.scales does.
std::optional<QuantFormat> stored_format(const ModelConfig& c, const ModelFiles& files,
                                         const std::string& module, const std::string& dir) {
  const bool has_scales = files.find(module + ".scales") != nullptr;
  if (!c.quantization) {
    GLM4_CHECK(!has_scales, dir, ": ", module,
               ".scales is present but config.json has no "
               "\"quantization\" (group_size, bits) to read it with");
    return std::nullopt;
  }
  if (const std::optional<QuantFormat>* o = c.quantization->override_for(module)) return *o;
  if (!has_scales) return std::nullopt;
  return c.quantization->format;
}

// Loads MODULE.weight / .scales / .biases as a quantized view; the keys go into `used`, the
// absent ones into `missing`.
void load_quantized(const std::string& module, Param& p, QuantFormat format,
                    const ModelFiles& files, const std::string& dir, std::set<std::string>& used,
                    std::vector<std::string>& missing) {
  const TensorInfo* parts[3];
  auto owners = std::make_shared<Owners>();
  const char* suffixes[3] = {".weight", ".scales", ".biases"};
  bool complete = true;
  for (int i = 0; i < 3; ++i) {
    const std::string key = module + suffixes[i];
    parts[i] = files.find(key);
    if (!used.insert(key).second) continue;
    if (parts[i] == nullptr) {
      missing.push_back(key);
      complete = false;
    } else {
      owners->files.push_back(files.owner(key));
    }
  }
  if (!complete) return;
  const QuantizedMatrix q =
      quantized_module_view(parts[0], parts[1], parts[2], dir + ": " + module, format);
  GLM4_CHECK(q.rows == p.shape[0] && q.cols == p.shape[1], dir, ": ", module, " holds a ", q.rows,
             " x ", q.cols, " matrix at ", format.bits, " bits, expected ", shape_str(p.shape),
             " from config.json");
  p.assign(Weight::quantized_view(q, owners));
}
// One expert of mlx-lm's stacked quantized experts (src: rows of the switch_mlp tensor): a view
// of rows [row_begin, row_begin + out) of the stacked codes, scales and biases [E, out, *].
void load_quantized_expert(const FileSlice& src, Param& p, QuantFormat format,
                           const ModelFiles& files, const std::string& dir,
                           std::set<std::string>& used, std::vector<std::string>& missing) {
  const std::string module = src.key.substr(0, src.key.size() - 7);
  const int64_t experts = src.file_shape[0], out = src.file_shape[1];
  auto owners = std::make_shared<Owners>();
  std::optional<QuantizedMatrix> stacked = stacked_quantized_view(
      files, module, experts, out, format, dir, used, missing, &owners->files);
  if (!stacked) return;
  QuantizedMatrix q = *stacked;
  GLM4_CHECK(q.cols == p.shape[1], dir, ": ", module, " holds experts of ", q.cols, " inputs at ",
             format.bits, " bits, expected ", p.shape[1], " from config.json");
  const size_t param_bytes = size_t(src.row_begin * q.groups()) * dtype_size(q.scale_dtype);
  q.packed += src.row_begin * q.row_bytes();
  q.scales = static_cast<const std::byte*>(q.scales) + param_bytes;
  q.biases = static_cast<const std::byte*>(q.biases) + param_bytes;
  q.rows = out;
  p.assign(Weight::quantized_view(q, owners));
}

const std::string kKvBProj = ".kv_b_proj.weight";
}  // namespace

std::unique_ptr<Glm4Model> load_model(const std::filesystem::path& dir, FileResidency residency) {
  const auto start = std::chrono::steady_clock::now();
  ModelConfig config = load_model_config(dir);
  auto model = std::make_unique<Glm4Model>(config);
  ModelFiles files = ModelFiles::open(dir, residency);
  bool stacked = false;  // mlx-lm's glm4_moe layout: each layer's experts in switch_mlp tensors
  for (const std::string& k : files.keys()) stacked |= is_stacked_expert_key(k);
  GLM4_CHECK(!stacked || is_moe_family(config), dir.string(),
             ": the files hold stacked experts (mlp.switch_mlp.*) but config.json describes a ",
             family_name(config.family), " model");
  bool split = false;  // mlx-lm's glm4_moe_lite layout: kv_b_proj as embed_q and unembed_out
  for (const std::string& k : files.keys()) {
    GLM4_CHECK(!is_split_kv_b_key(k) || has_latent_attention(config), dir.string(), ": ", k,
               " is mlx-lm's glm4_moe_lite split of kv_b_proj, but config.json describes a ",
               family_name(config.family), " model");
    split |= is_split_kv_b_key(k);
  }
  size_t rebuilt_bytes = 0;
  std::set<std::string> used, matrices;
  std::vector<std::string> missing;
  model->visit([&](const std::string& name, Param& p) {
    FileSlice src = file_slice(config, name, stacked);
    if (p.is_matrix() && name.ends_with(".weight")) {
      const std::string module = name.substr(0, name.size() - 7);
      // A stacked expert is stored (and named in config.json's quantization) as its switch_mlp
      // module.
      const bool stacked_expert = !src.file_shape.empty();
      const std::string stored = stacked_expert ? src.key.substr(0, src.key.size() - 7) : module;
      if (split && name.ends_with(kKvBProj)) {
        const std::string attn = name.substr(0, name.size() - kKvBProj.size());
        KvBSplitFormats f;
        f.embed_q = stored_format(config, files, attn + ".embed_q", dir.string());
        f.unembed_out = stored_format(config, files, attn + ".unembed_out", dir.string());
        matrices.insert({attn + ".embed_q", attn + ".unembed_out"});
        Weight w =
            load_kv_b_split(config, files, attn, f, dir.string(), used, missing, rebuilt_bytes);
        if (w.empty()) return;
        p.assign(std::move(w));
        discard_kv_b_split(files, attn);
        return;
      }
      matrices.insert(stored);
      if (auto format = stored_format(config, files, stored, dir.string())) {
        if (stacked_expert)
          load_quantized_expert(src, p, *format, files, dir.string(), used, missing);
        else
          load_quantized(module, p, *format, files, dir.string(), used, missing);
        return;
      }
    }
    const TensorInfo* t = files.find(src.key);
    if (!t) {
      if (!used.count(src.key)) missing.push_back(src.key);
      used.insert(src.key);
      return;
    }
    used.insert(src.key);
    load_param(name, p, src, *t, files.owner(src.key), dir.string());
  });
  if (config.quantization)
    for (const auto& [module, format] : config.quantization->modules)
      GLM4_CHECK(matrices.count(module), dir.string(),
                 "/config.json: field \"quantization\" has an ", "override for ", module,
                 ", which is not a matrix of this model");
  std::vector<std::string> unexpected;
  for (const std::string& k : files.keys())
    if (!used.count(k) && !is_ignorable_file_key(config, k)) unexpected.push_back(k);
  if (!missing.empty() || !unexpected.empty()) {
    std::string msg = dir.string() + ": the weight files do not match config.json (" +
                      family_name(config.family) + ")";
    if (!missing.empty())
      msg += "\nmissing keys (" + std::to_string(missing.size()) + "):" + join_sorted(missing);
    if (!unexpected.empty())
      msg += "\nunexpected keys (" + std::to_string(unexpected.size()) +
             "):" + join_sorted(unexpected);
    fail(msg);
  }
  model->loaded.residency = files.residency();
  model->loaded.file_bytes = files.file_bytes();
  model->loaded.direct_bytes = files.direct_bytes();
  model->loaded.huge_page_bytes = anon_huge_page_bytes();
  model->loaded.rebuilt_bytes = rebuilt_bytes;
  model->loaded.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return model;
}

}  // namespace glm4
