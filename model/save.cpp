// Writing a model directory: each tensor is produced (borrowed, converted, dequantized or
// quantized) when the file writer reaches it, and config.json describes what was written.
#include "model/save.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "autograd/weight_quantize.h"
#include "base/check.h"
#include "base/parallel.h"
#include "base/progress_bar.h"
#include "io/file/atomic_file.h"
#include "io/model_files.h"
#include "model/key_layout.h"

namespace glm4 {

namespace {
constexpr size_t kChunkBytes = size_t(16) << 20;  // what a producer converts at a time

// Rounds `n` floats once to `dtype`, written little-endian at `out`.
void store(const float* src, int64_t n, DType dtype, std::byte* out) {
  if (dtype == DType::F32) {
    std::memcpy(out, src, size_t(n) * 4);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h = dtype == DType::BF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
    std::memcpy(out + i * 2, &h, 2);
  }
}

std::vector<std::pair<std::string, Shape>> shapes_of(Glm4Model& m) {
  std::vector<std::pair<std::string, Shape>> s;
  m.visit([&](const std::string& name, Param& p) { s.emplace_back(name, p.shape); });
  return s;
}

// One parameter's rows inside an output tensor.
struct Piece {
  std::string name;
  Param* param;
  int64_t row_begin;
};

// One tensor of the output, or one of the three of a quantized module (part 0 codes, 1 scales,
// 2 biases).
struct OutTensor {
  std::vector<Piece> pieces;  // dense: in row order
  const DerivedTensor* derived = nullptr;
  std::optional<QuantFormat> format;  // quantized module
  bool as_is = false;                 // quantized: the held bytes, unchanged
  int part = 0;
  DType dtype = DType::F32;  // dense: the dtype written
};

// The dtype a dense tensor is written in: the requested one, except glm4_moe's router bias,
// which transformers keeps in fp32 (_keep_in_fp32_modules) and reads back as fp32.
DType written_dtype(const std::string& key, DType requested) {
  return key.ends_with(".e_score_correction_bias") ? DType::F32 : requested;
}

// What a quantized module's codes pass leaves for its scales and biases.
struct PendingParams {
  std::vector<uint8_t> scales, biases;
};

std::string module_of(const std::string& name) { return name.substr(0, name.size() - 7); }
// A matrix save_model may write quantized: one named "<module>.weight".
bool quantizable(const std::string& name, const Param& p) {
  return p.is_matrix() && name.ends_with(".weight");
}

class ModelWriter {
 public:
  ModelWriter(Glm4Model& model, const ModelConfig& config, const SaveOptions& o)
      : config_(config), o_(o) {
    model.visit([&](const std::string& name, Param& p) { plan(name, p); });
    for (const DerivedTensor& d : derived_) add_derived(d);
  }

  // What config.json must say about the quantized modules.
  std::optional<QuantConfig> quantization() const;
  void write(const std::filesystem::path& dir);

 private:
  void plan(const std::string& name, Param& p);
  void add_derived(const DerivedTensor& d);
  Weight held(const Piece& piece) const;
  void produce(size_t i, TensorSink& sink);
  void write_dense(const OutTensor& t, TensorSink& sink);
  void write_codes(const OutTensor& t, TensorSink& sink);

  const ModelConfig& config_;
  const SaveOptions& o_;
  std::vector<DerivedTensor> derived_ = derived_file_tensors(config_);
  std::vector<TensorToWrite> specs_;
  std::vector<OutTensor> out_;
  std::map<std::string, size_t> index_;                         // dense key -> position
  std::map<std::string, std::optional<QuantFormat>> matrices_;  // module -> written format
  std::map<std::string, int64_t> numel_;                        // module -> parameters
  PendingParams pending_;
  std::optional<WriteProgress> progress_;
};

void ModelWriter::plan(const std::string& name, Param& p) {
  GLM4_CHECK(o_.source || p.loaded(), "[save_model] ", name, " is not loaded");
  const FileSlice src = file_slice(config_, name);
  const bool whole = src.total_rows < 0;
  if (quantizable(name, p)) {
    const std::string module = module_of(name);
    const bool held_quantized = !p.value.defined() && p.frozen.is_quantized();
    std::optional<QuantFormat> format;
    if (o_.quantize)
      format = o_.quantize(module, p);
    else if (held_quantized && !o_.dequantize)
      format = p.frozen.quant().format();
    matrices_[module] = format;
    numel_[module] = shape_numel(p.shape);
    if (format) {
      GLM4_CHECK(whole, "[save_model] ", name, ": quantized ", family_name(config_.family),
                 " files are not supported");
      GLM4_CHECK(p.shape[1] % format->group_size == 0, "[save_model] ", module, ": group_size ",
                 format->group_size, " does not divide in_features ", p.shape[1]);
      const bool as_is = held_quantized && p.frozen.quant().format() == *format;
      const DType sd = as_is ? p.frozen.dtype() : o_.dtype;
      const int64_t rows = p.shape[0], groups = p.shape[1] / format->group_size;
      const size_t params = size_t(rows * groups) * dtype_size(sd);
      specs_.push_back({name,
                        "U32",
                        {rows, p.shape[1] * format->bits / 32},
                        nullptr,
                        size_t(rows * p.shape[1] * format->bits / 8)});
      specs_.push_back({module + ".scales", dtype_name(sd), {rows, groups}, nullptr, params});
      specs_.push_back({module + ".biases", dtype_name(sd), {rows, groups}, nullptr, params});
      for (int part = 0; part < 3; ++part)
        out_.push_back({{{name, &p, 0}}, nullptr, format, as_is, part});
      return;
    }
  }
  auto it = index_.find(src.key);
  if (it == index_.end()) {
    Shape shape = p.shape;
    if (!whole) shape[0] = src.total_rows;
    const DType dtype = written_dtype(src.key, o_.dtype);
    specs_.push_back({src.key, dtype_name(dtype), shape, nullptr,
                      size_t(shape_numel(shape)) * dtype_size(dtype)});
    out_.push_back({});
    out_.back().dtype = dtype;
    it = index_.emplace(src.key, out_.size() - 1).first;
  }
  std::vector<Piece>& pieces = out_[it->second].pieces;
  pieces.push_back({name, &p, src.row_begin});
  std::sort(pieces.begin(), pieces.end(),
            [](const Piece& a, const Piece& b) { return a.row_begin < b.row_begin; });
}

void ModelWriter::add_derived(const DerivedTensor& d) {
  specs_.push_back(
      {d.key, dtype_name(o_.dtype), d.shape, nullptr, d.values.size() * dtype_size(o_.dtype)});
  OutTensor t;
  t.derived = &d;
  out_.push_back(std::move(t));
}

std::optional<QuantConfig> ModelWriter::quantization() const {
  std::map<std::pair<int, int>, int64_t> weight;  // (bits, group) -> parameters
  for (const auto& [module, f] : matrices_)
    if (f) weight[{f->bits, f->group_size}] += numel_.at(module);
  if (weight.empty()) return std::nullopt;
  auto top = std::max_element(weight.begin(), weight.end(),
                              [](const auto& a, const auto& b) { return a.second < b.second; });
  QuantConfig q;
  q.format = {top->first.first, top->first.second};
  for (const auto& [module, f] : matrices_)
    if (f != q.format) q.modules[module] = f;
  return q;
}

Weight ModelWriter::held(const Piece& piece) const {
  const Param& p = *piece.param;
  if (o_.source) {
    Weight w = o_.source(piece.name, p);
    GLM4_CHECK(w.numel() == shape_numel(p.shape), "[save_model] ", piece.name,
               ": the source gave a ", w.rows(), " x ", w.cols(), " tensor for shape ",
               shape_str(p.shape));
    return w;
  }
  if (p.value.defined()) {
    const int64_t rows = p.shape[0], cols = p.is_matrix() ? p.shape[1] : 1;
    return Weight::view(DType::F32, p.value.data(), rows, cols, p.value.impl_ptr());
  }
  return p.frozen;
}

void ModelWriter::write_dense(const OutTensor& t, TensorSink& sink) {
  std::vector<std::byte> bytes;
  std::vector<float> f32;
  if (t.derived) {
    bytes.resize(t.derived->values.size() * dtype_size(o_.dtype));
    store(t.derived->values.data(), int64_t(t.derived->values.size()), o_.dtype, bytes.data());
    sink.write(bytes.data(), bytes.size());
    return;
  }
  int64_t next_row = 0;
  for (const Piece& piece : t.pieces) {
    GLM4_CHECK(piece.row_begin == next_row, "[save_model] ", piece.name,
               " leaves a gap in its file tensor");
    const Weight w = held(piece);
    next_row += piece.param->shape[0];
    if (!w.is_quantized() && w.dtype() == t.dtype) {  // already in the output dtype
      sink.write(w.data(), w.bytes());
      continue;
    }
    // A vector is one row of `rows` values (Weight 1 x n); a matrix goes row block by block.
    const int64_t wr = w.rows(), wc = w.cols();
    const int64_t step = std::max<int64_t>(1, int64_t(kChunkBytes / 4) / std::max<int64_t>(1, wc));
    for (int64_t r0 = 0; r0 < wr; r0 += step) {
      const int64_t n = std::min(wr, r0 + step) - r0;
      f32.resize(size_t(n * wc));
      bytes.resize(size_t(n * wc) * dtype_size(t.dtype));
      parallel_for(n, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, wc)),
                   [&](int64_t a, int64_t b) {
                     for (int64_t r = a; r < b; ++r) w.row_to_f32(r0 + r, f32.data() + r * wc);
                   });
      store(f32.data(), n * wc, t.dtype, bytes.data());
      sink.write(bytes.data(), bytes.size());
    }
  }
}

void ModelWriter::write_codes(const OutTensor& t, TensorSink& sink) {
  const Piece& piece = t.pieces[0];
  if (t.as_is) {  // the bytes the parameter holds
    const QuantizedMatrix& q = piece.param->frozen.quant();
    const size_t params = size_t(q.rows * q.groups()) * dtype_size(q.scale_dtype);
    if (t.part == 0) sink.write(q.packed, size_t(q.rows * q.row_bytes()));
    if (t.part == 1) sink.write(q.scales, params);
    if (t.part == 2) sink.write(q.biases, params);
    return;
  }
  if (t.part > 0) {
    std::vector<uint8_t>& v = t.part == 1 ? pending_.scales : pending_.biases;
    sink.write(v.data(), v.size());
    v.clear();
    v.shrink_to_fit();
    return;
  }
  const Weight w = held(piece);
  const int64_t step =
      std::max<int64_t>(1, int64_t(kChunkBytes / 4) / std::max<int64_t>(1, w.cols()));
  pending_ = {};
  for (int64_t r0 = 0; r0 < w.rows(); r0 += step) {
    QuantizedStorage q = quantize_rows(w, r0, std::min(w.rows(), r0 + step), *t.format, o_.dtype,
                                       module_of(piece.name));
    sink.write(q.packed.data(), q.packed.size() * sizeof(uint32_t));
    pending_.scales.insert(pending_.scales.end(), q.scales.begin(), q.scales.end());
    pending_.biases.insert(pending_.biases.end(), q.biases.begin(), q.biases.end());
  }
}

void ModelWriter::produce(size_t i, TensorSink& sink) {
  const OutTensor& t = out_[i];
  if (t.format)
    write_codes(t, sink);
  else
    write_dense(t, sink);
  if (progress_) progress_->add(specs_[i].nbytes, specs_[i].name);
}

void ModelWriter::write(const std::filesystem::path& dir) {
  if (!o_.progress_label.empty()) {
    size_t total = 0;
    for (const auto& s : specs_) total += s.nbytes;
    progress_.emplace(o_.progress_label, total);
  }
  write_model_files_streamed(dir, specs_, [&](size_t i, TensorSink& sink) { produce(i, sink); },
                             o_.max_shard_bytes, {{"format", "pt"}});
  if (progress_) progress_->finish();
}
}  // namespace

std::vector<std::string> quantizable_modules(Glm4Model& model) {
  std::vector<std::string> modules;
  model.visit([&](const std::string& name, Param& p) {
    if (quantizable(name, p)) modules.push_back(module_of(name));
  });
  return modules;
}

void save_model(Glm4Model& model, const ModelConfig& config, const std::filesystem::path& out_dir,
                const SaveOptions& o) {
  GLM4_CHECK(model.lora_parameters().empty(), "[save_model] ", out_dir,
             ": the model has live LoRA adapters; merge them first");
  Glm4Model expected(config);  // shapes only: nothing is allocated
  GLM4_CHECK(shapes_of(expected) == shapes_of(model), "[save_model] ", out_dir, ": the config (",
             family_name(config.family), ") does not describe the model's tensors (",
             family_name(model.config.family), ")");
  ModelWriter writer(model, config, o);
  ModelConfig written = config;
  written.torch_dtype = o.dtype;
  written.num_nextn_predict_layers = 0;  // the MTP layers are never read, so never written
  written.quantization = writer.quantization();
  writer.write(out_dir);
  write_model_config(written, out_dir);
}

void save_model(Glm4Model& model, const ModelConfig& config, const std::filesystem::path& out_dir,
                DType dtype, size_t max_shard_bytes) {
  SaveOptions o;
  o.dtype = dtype;
  o.max_shard_bytes = max_shard_bytes;
  save_model(model, config, out_dir, o);
}

namespace {
nlohmann::json generation_config(const ModelConfig& c) {
  nlohmann::json j = nlohmann::json::object();
  j["_from_model_config"] = true;
  if (c.eos_token_ids.size() == 1)
    j["eos_token_id"] = c.eos_token_ids[0];
  else if (!c.eos_token_ids.empty())
    j["eos_token_id"] = c.eos_token_ids;
  if (c.pad_token_id) j["pad_token_id"] = *c.pad_token_id;
  j["transformers_version"] = c.family == ModelConfig::Family::ChatGlm ? "4.30.2" : "4.51.3";
  return j;
}
}  // namespace

void copy_model_companions(const std::filesystem::path& base_dir,
                           const std::filesystem::path& out_dir, const ModelConfig& config) {
  namespace fs = std::filesystem;
  for (const char* name : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                           "special_tokens_map.json", "generation_config.json"}) {
    const fs::path src = base_dir / name;
    if (fs::exists(src)) fs::copy_file(src, out_dir / name, fs::copy_options::overwrite_existing);
  }
  if (!fs::exists(out_dir / "generation_config.json"))
    write_file_atomic(out_dir / "generation_config.json", generation_config(config).dump(2) + "\n");
}

void write_generation_config(const ModelConfig& config, const std::filesystem::path& dir) {
  write_file_atomic(dir / "generation_config.json", generation_config(config).dump(2) + "\n");
}

void save_model(Glm4Model& model, const std::filesystem::path& dir, DType dtype,
                size_t max_shard_bytes) {
  save_model(model, model.config, dir, dtype, max_shard_bytes);
  write_generation_config(model.config, dir);
}

}  // namespace glm4
