// The adapter as it sits in files, independent of any model: settings plus every module's A and
// B in PEFT orientation. The PEFT and MLX readers/writers translate between this and the disk.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "autograd/tensor.h"
#include "model/adapter/adapter_io.h"

namespace glm4 {

struct AdapterModule {
  Shape a_shape;         // [r, in]
  Shape b_shape;         // [out, r]
  std::vector<float> a;  // A, row-major
  std::vector<float> b;  // B, row-major
};

struct AdapterFile {
  AdapterInfo info;
  // Keyed by our module path, e.g. "model.layers.3.self_attn.q_proj".
  std::map<std::string, AdapterModule> modules;
  // The model's decoder layer count when known (from a model or its config.json), else -1.
  int64_t total_layers = -1;

  std::set<int64_t> layers_present() const;
};

// The weight file of each layout, and the key a module's A (is_a) or B has in it.
const char* adapter_weights_file(const std::string& format);
std::string adapter_tensor_key(const std::string& format, const std::string& module, bool is_a);

// "peft" or "mlx" from the files in `dir`; throws naming the directory when neither is there.
std::string detect_adapter_format(const std::filesystem::path& dir);

// Reads config and tensors (with_tensors false: the weight file's header only, for the layer
// set). Checks the config fields, the key names, that A/B come in pairs with the config's rank,
// and that the modules are the targets on each adapted layer.
AdapterFile read_adapter_file(const std::filesystem::path& dir, bool with_tensors = true);

// Writes `a` in `format` into `dir` (created if missing); removes the other layout's weight file.
void write_adapter_file(const AdapterFile& a, const std::filesystem::path& dir,
                        const std::string& format);

}  // namespace glm4
