// Loading a model directory: a strict name walk over the parameter visitor. Matrices stay in
// their stored dtype as zero-copy views of the mapped file; vectors are widened to fp32.
#include <algorithm>
#include <cstring>
#include <set>

#include "base/check.h"
#include "io/model_files.h"
#include "model/key_layout.h"
#include "model/glm4_model.h"

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
  DType dtype = t.float_dtype();
  Shape expected = p.shape;
  if (src.total_rows >= 0) expected[0] = src.total_rows;
  GLM4_CHECK(t.shape == expected, dir, ": tensor ", t.name, " has shape ", shape_str(t.shape),
             ", expected ", shape_str(expected), " from config.json");
  int64_t rows = p.shape[0], cols = p.shape.size() == 2 ? p.shape[1] : 1;
  const std::byte* data = t.data + size_t(src.row_begin * cols) * dtype_size(dtype);
  bool aligned = reinterpret_cast<uintptr_t>(data) % dtype_size(dtype) == 0;
  p.assign(aligned ? Weight::view(dtype, data, rows, cols, std::move(owner))
                   : Weight::copy_of(dtype, data, rows, cols));
}
}  // namespace

std::unique_ptr<Glm4Model> load_model(const std::filesystem::path& dir) {
  ModelConfig config = load_model_config(dir);
  auto model = std::make_unique<Glm4Model>(config);
  ModelFiles files = ModelFiles::open(dir);
  std::set<std::string> used;
  std::vector<std::string> missing;
  model->visit([&](const std::string& name, Param& p) {
    FileSlice src = file_slice(config, name);
    const TensorInfo* t = files.find(src.key);
    if (!t) {
      if (!used.count(src.key)) missing.push_back(src.key);
      used.insert(src.key);
      return;
    }
    used.insert(src.key);
    load_param(name, p, src, *t, files.owner(src.key), dir.string());
  });
  std::vector<std::string> unexpected;
  for (const std::string& k : files.keys())
    if (!used.count(k) && !is_ignorable_file_key(config, k)) unexpected.push_back(k);
  if (!missing.empty() || !unexpected.empty()) {
    std::string msg = dir.string() + ": the weight files do not match config.json (" +
                      family_name(config.family) + ")";
    if (!missing.empty()) msg += "\nmissing keys (" + std::to_string(missing.size()) + "):" + join_sorted(missing);
    if (!unexpected.empty())
      msg += "\nunexpected keys (" + std::to_string(unexpected.size()) + "):" + join_sorted(unexpected);
    fail(msg);
  }
  return model;
}

}  // namespace glm4
