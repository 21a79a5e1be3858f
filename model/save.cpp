#include "model/save.h"

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"

#include <cstring>
#include <map>
#include <vector>

#include "base/check.h"
#include "io/model_files.h"
#include "model/key_layout.h"

namespace glm4 {

namespace {
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

struct Shapes {
  std::vector<std::pair<std::string, Shape>> list;
};

Shapes shapes_of(Glm4Model& m) {
  Shapes s;
  m.visit([&](const std::string& name, Param& p) { s.list.emplace_back(name, p.shape); });
  return s;
}

// One tensor of the output file, owning its bytes unless it points into a Weight.
struct OutTensor {
  std::string key;
  Shape shape;
  std::vector<std::byte> bytes;
  const void* borrowed = nullptr;
};
}  // namespace

void save_model(Glm4Model& model, const ModelConfig& config, const std::filesystem::path& out_dir,
                DType dtype, size_t max_shard_bytes) {
  GLM4_CHECK(model.lora_parameters().empty(), "[save_model] ", out_dir, ": the model has live LoRA adapters; merge them first");
  Glm4Model expected(config);  // shapes only: nothing is allocated
  Shapes want = shapes_of(expected), have = shapes_of(model);
  GLM4_CHECK(want.list == have.list, "[save_model] ", out_dir, ": the config (",
             family_name(config.family), ") does not describe the model's tensors (",
             family_name(model.config.family), ")");

  const size_t esize = dtype_size(dtype);
  std::vector<OutTensor> out;
  std::map<std::string, size_t> index;  // key -> position in out
  std::vector<float> row;
  model.visit([&](const std::string& name, Param& p) {
    GLM4_CHECK(p.loaded(), "[save_model] ", name, " is not loaded");
    FileSlice src = file_slice(config, name);
    const int64_t rows = p.shape[0], cols = p.shape.size() == 2 ? p.shape[1] : 1;
    const bool whole = src.total_rows < 0;
    if (whole && !p.value.defined() && p.frozen.dtype() == dtype) {
      out.push_back({src.key, p.shape, {}, p.frozen.data()});
      index[src.key] = out.size() - 1;
      return;
    }
    auto it = index.find(src.key);
    if (it == index.end()) {
      Shape shape = p.shape;
      if (!whole) shape[0] = src.total_rows;
      out.push_back({src.key, shape, std::vector<std::byte>(size_t(shape_numel(shape)) * esize), nullptr});
      it = index.emplace(src.key, out.size() - 1).first;
    }
    OutTensor& t = out[it->second];
    GLM4_CHECK(src.row_begin + rows <= t.shape[0], "[save_model] ", name, " overflows ", src.key);
    std::byte* dst = t.bytes.data() + size_t(src.row_begin * cols) * esize;
    if (p.value.defined()) {
      store(p.value.data(), rows * cols, dtype, dst);
    } else {
      row.resize(size_t(cols));
      for (int64_t r = 0; r < rows; ++r) {
        p.frozen.row_to_f32(r, row.data());
        store(row.data(), cols, dtype, dst + size_t(r * cols) * esize);
      }
    }
  });

  for (const DerivedTensor& d : derived_file_tensors(config)) {
    OutTensor& t = out.emplace_back();
    t.key = d.key;
    t.shape = d.shape;
    t.bytes.resize(d.values.size() * esize);
    store(d.values.data(), int64_t(d.values.size()), dtype, t.bytes.data());
  }

  std::vector<TensorToWrite> tensors;
  tensors.reserve(out.size());
  for (const OutTensor& t : out) {
    size_t nbytes = size_t(shape_numel(t.shape)) * esize;
    tensors.push_back({t.key, dtype_name(dtype), t.shape, t.borrowed ? t.borrowed : t.bytes.data(), nbytes});
  }
  write_model_files(out_dir, tensors, max_shard_bytes, {{"format", "pt"}});
  ModelConfig written = config;
  written.torch_dtype = dtype;
  write_model_config(written, out_dir);
}

namespace {
nlohmann::json generation_config(const ModelConfig& c) {
  nlohmann::json j = nlohmann::json::object();
  j["_from_model_config"] = true;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  else if (!c.eos_token_ids.empty()) j["eos_token_id"] = c.eos_token_ids;
  if (c.pad_token_id) j["pad_token_id"] = *c.pad_token_id;
  j["transformers_version"] = c.family == ModelConfig::Family::ChatGlm ? "4.30.2" : "4.51.3";
  return j;
}
}  // namespace

void copy_model_companions(const std::filesystem::path& base_dir, const std::filesystem::path& out_dir,
                           const ModelConfig& config) {
  namespace fs = std::filesystem;
  for (const char* name : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                           "special_tokens_map.json", "generation_config.json"}) {
    const fs::path src = base_dir / name;
    if (fs::exists(src)) fs::copy_file(src, out_dir / name, fs::copy_options::overwrite_existing);
  }
  if (!fs::exists(out_dir / "generation_config.json"))
    write_file_atomic(out_dir / "generation_config.json", generation_config(config).dump(2) + "\n");
}

void save_model(Glm4Model& model, const std::filesystem::path& dir, DType dtype, size_t max_shard_bytes) {
  save_model(model, model.config, dir, dtype, max_shard_bytes);
  write_file_atomic(dir / "generation_config.json", generation_config(model.config).dump(2) + "\n");
}

}  // namespace glm4
