// Writing a model back as a Hugging Face model directory: config.json, generation_config.json and
// the weights under the family's key names, in the requested dtype.
#include "model/save.h"

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "autograd/check.h"
#include "io/atomic_file.h"
#include "io/model_files.h"
#include "model/checkpoint_layout.h"
#include "model/glm4_model.h"

namespace glm4 {
namespace fs = std::filesystem;

namespace {
// One tensor of the file: its bytes either borrowed from a frozen Weight or converted here.
struct OutTensor {
  std::string key;
  Shape shape;
  const void* borrowed = nullptr;
  std::vector<std::byte> bytes;
};

// p's values converted to `dtype`, written to out.
void convert_into(const Param& p, DType dtype, std::byte* out) {
  Tensor f = p.to_f32();
  const int64_t n = f.numel();
  const float* src = f.data();
  if (dtype == DType::F32) {
    std::memcpy(out, src, size_t(n) * 4);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h = dtype == DType::BF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

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

void save_model(Glm4Model& model, const fs::path& dir, DType dtype, size_t max_shard_bytes) {
  ModelConfig config = model.config;
  config.torch_dtype = dtype;
  const size_t esize = dtype_size(dtype);
  std::vector<OutTensor> out;
  std::map<std::string, size_t> index;  // file key -> position in out
  model.visit([&](const std::string& name, Param& p) {
    GLM4_CHECK(p.loaded(), "save_model ", dir, ": ", name, " holds no values");
    SourceSlice src = checkpoint_source(config, name);
    const int64_t rows = p.shape[0], cols = p.shape.size() == 2 ? p.shape[1] : 1;
    if (src.total_rows < 0) {
      OutTensor& t = out.emplace_back();
      t.key = src.key;
      t.shape = p.shape;
      if (p.is_matrix() && !p.value.defined() && p.frozen.dtype() == dtype) {
        t.borrowed = p.frozen.data();  // already in the file's format: no copy
      } else {
        t.bytes.resize(size_t(rows * cols) * esize);
        convert_into(p, dtype, t.bytes.data());
      }
      return;
    }
    // A slice of a fused tensor (ChatGLM query_key_value): place our rows where they belong.
    auto [it, fresh] = index.try_emplace(src.key, out.size());
    if (fresh) {
      OutTensor& t = out.emplace_back();
      t.key = src.key;
      t.shape = p.shape;
      t.shape[0] = src.total_rows;
      t.bytes.resize(size_t(src.total_rows * cols) * esize);
    }
    OutTensor& t = out[it->second];
    GLM4_CHECK(src.row_begin + rows <= src.total_rows, "save_model: ", name, " rows exceed ", src.key);
    convert_into(p, dtype, t.bytes.data() + size_t(src.row_begin * cols) * esize);
  });
  std::vector<TensorToWrite> tensors;
  for (const OutTensor& t : out) {
    size_t nbytes = size_t(shape_numel(t.shape)) * esize;
    tensors.push_back({t.key, dtype_name(dtype), t.shape, t.borrowed ? t.borrowed : t.bytes.data(), nbytes});
  }
  write_checkpoint(dir, tensors, max_shard_bytes, {{"format", "pt"}});
  write_model_config(config, dir);
  write_file_atomic(dir / "generation_config.json", generation_config(config).dump(2) + "\n");
}

}  // namespace glm4
