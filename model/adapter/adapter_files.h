// The adapter as it sits in files, independent of any model: settings plus every module's A and
// B in PEFT orientation (and DoRA's magnitude). The PEFT and MLX readers/writers translate
// between this and the disk; ChatGLM's fused query_key_value is one module here, split into
// q/k/v modules sharing A for the MLX layout and for the model.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "autograd/tensor.h"
#include "model/adapter/adapter_io.h"
#include "model/config.h"

namespace glm4 {

struct AdapterModule {
  Shape a_shape;                 // [r, in]
  Shape b_shape;                 // [out, r]
  Shape magnitude_shape;         // [out] for DoRA, else empty
  std::vector<float> a;          // A, row-major
  std::vector<float> b;          // B, row-major
  std::vector<float> magnitude;  // DoRA's m
};

struct AdapterFile {
  AdapterInfo info;
  // Keyed by our module path, e.g. "model.layers.3.self_attn.q_proj" (ChatGLM's fused module:
  // "model.layers.3.self_attn.query_key_value").
  std::map<std::string, AdapterModule> modules;
  // The model's decoder layer count when known (from a model or its config.json), else -1.
  int64_t total_layers = -1;
  // Made for a ChatGLM checkpoint: PEFT keys use its module paths (transformer.encoder...).
  bool chatglm = false;
  // Rows of q, k and v in a fused query_key_value (from the model or its config.json), when known.
  std::vector<int64_t> qkv_rows;
  // glm4_moe's routed experts per MoE layer (from the model or its config.json), else -1: the
  // MLX layout stacks every expert of a layer into one tensor.
  int64_t num_experts = -1;

  std::set<int64_t> layers_present() const;
};

enum class AdapterPart { A, B, Magnitude };

// The weight file of each layout, and the key a module's part has in it (ChatGLM's own module
// paths in a PEFT file when `chatglm`).
const char* adapter_weights_file(const std::string& format);
std::string adapter_tensor_key(const std::string& format, const std::string& module,
                               AdapterPart part, bool chatglm = false);

// Rows of q, k and v in ChatGLM's query_key_value for this config.
std::vector<int64_t> qkv_rows_of(const ModelConfig& c);
// Each fused query_key_value module becomes q_proj, k_proj and v_proj with the same A and B (and
// magnitude) cut by a.qkv_rows; the targets follow. Throws naming `where` when the rows are
// unknown or do not add up to B's.
void split_fused_qkv(AdapterFile& a, const std::string& where);
// The inverse, for the PEFT layout of ChatGLM: q/k/v modules of a layer with bitwise equal A
// become one query_key_value module. Throws naming `where` and the layer when one of the three is
// missing or their A differ (independent q/k/v adapters have no PEFT form for ChatGLM).
void join_fused_qkv(AdapterFile& a, const std::string& where);

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
