// Dense tensor checks and stacked quantized views for the loaders (load_file_tensors.h).
#include "model/load_file_tensors.h"

#include "base/check.h"

namespace glm4 {

DType dense_tensor_dtype(const TensorInfo& t, const Shape& expected, const std::string& dir) {
  GLM4_CHECK(t.dtype != "U32", dir, ": ", t.name,
             " holds U32 (quantized) codes, but config.json's "
             "\"quantization\" does not quantize this module");
  const DType dtype = t.float_dtype();
  GLM4_CHECK(t.shape == expected, dir, ": tensor ", t.name, " has shape ", shape_str(t.shape),
             ", expected ", shape_str(expected), " from config.json");
  return dtype;
}

std::optional<QuantizedMatrix> stacked_quantized_view(
    const ModelFiles& files, const std::string& module, int64_t d0, int64_t d1, QuantFormat format,
    const std::string& dir, std::set<std::string>& used, std::vector<std::string>& missing,
    std::vector<std::shared_ptr<const void>>* owners) {
  TensorInfo flat[3];
  const char* suffixes[3] = {".weight", ".scales", ".biases"};
  bool complete = true;
  for (int i = 0; i < 3; ++i) {
    const std::string key = module + suffixes[i];
    const TensorInfo* t = files.find(key);
    const bool first = used.insert(key).second;
    if (t == nullptr) {
      if (first) missing.push_back(key);
      complete = false;
      continue;
    }
    GLM4_CHECK(t->shape.size() == 3 && t->shape[0] == d0 && t->shape[1] == d1, dir, ": tensor ",
               key, " has shape ", shape_str(t->shape), ", expected (", d0, ",", d1,
               ",...) from config.json");
    if (owners) owners->push_back(files.owner(key));
    flat[i] = *t;
    flat[i].shape = {d0 * d1, t->shape[2]};
  }
  if (!complete) return std::nullopt;
  return quantized_module_view(&flat[0], &flat[1], &flat[2], dir + ": " + module, format);
}

}  // namespace glm4
