// Internals shared by the PEFT and MLX adapter readers/writers: typed access to JSON fields with
// errors that name the file and field, and the checks both layouts apply after reading.
#pragma once
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "io/safetensors.h"
#include "model/adapter/adapter_files.h"

namespace glm4::adapter_detail {

using json = nlohmann::json;

// read_json_file (io/file/json_file.h) checked to hold an object.
json read_json_object(const std::filesystem::path& path);

// Typed fields of a JSON object; `file` names it in errors. A null or absent field takes `def`
// when given, else is an error.
int64_t get_int(const json& j, const char* key, const std::string& file,
                std::optional<int64_t> def = std::nullopt);
double get_number(const json& j, const char* key, const std::string& file,
                  std::optional<double> def = std::nullopt);
bool get_bool(const json& j, const char* key, const std::string& file,
              std::optional<bool> def = std::nullopt);
std::string get_string(const json& j, const char* key, const std::string& file,
                       std::optional<std::string> def = std::nullopt);
// A number with an integral value is written as an integer (lora_alpha 16, not 16.0).
json number_json(double v);
// alpha = scale * r, snapped to the nearest integer when it is one up to rounding.
double alpha_from_scale(double scale, int64_t rank);

// Maps a tensor key to (module path, part); false for keys that are no adapter tensor.
using KeyParser =
    std::function<bool(const std::string& key, std::string* module, AdapterPart* part)>;
// Reads every tensor of `path` through `parse` into a.modules (transposing MLX's [in, r] /
// [r, out] when `transposed`), then checks pairs, ranks, DoRA magnitudes (present exactly when
// a.info.lora.dora) and that the modules are exactly the targets on each adapted layer.
// `targets_from_config` false: the targets are whatever the file holds. With with_tensors false
// only shapes are kept.
void read_tensors(AdapterFile& a, const std::filesystem::path& path, const KeyParser& parse,
                  bool transposed, bool targets_from_config, bool with_tensors);

// Target names in lora_module_names() order (ChatGLM's names mapped to ours); each entry may
// carry a parent prefix ("self_attn.q_proj", "self_attention.dense") that must be the module's
// real parent. Throws naming the file and field.
std::vector<std::string> canonical_targets(const std::vector<std::string>& names,
                                           const std::string& file, const char* field);

// mlx-lm's LoRASwitchLinear on glm4_moe's stacked experts: module paths
// model.layers.N.mlp.switch_mlp.X stand for every routed expert model.layers.N.mlp.experts.E.X.
// Why the MLX layout refuses a kv_b_proj adapter.
extern const char* const kNoMlxKvB;
bool is_switch_module(const std::string& module);
// model.layers.N.mlp.experts.E.X -> (model.layers.N.mlp.switch_mlp.X, E); false for other paths.
bool split_expert_path(const std::string& path, std::string* switch_module, int64_t* expert);
// Splits a stacked lora_a [E, r, in] or lora_b [E, out, r] of switch module `module` into the
// experts' modules of `a` (shapes only without with_tensors); `seen` gets each expert's part bit.
void read_switch_tensor(AdapterFile& a, const TensorInfo& t, const std::string& module,
                        AdapterPart part, bool with_tensors, const std::string& fname,
                        std::map<std::string, int>& seen);

AdapterFile read_peft(const std::filesystem::path& dir, bool with_tensors);
AdapterFile read_mlx(const std::filesystem::path& dir, bool with_tensors);
void write_peft(const AdapterFile& a, const std::filesystem::path& dir);
void write_mlx(const AdapterFile& a, const std::filesystem::path& dir);

}  // namespace glm4::adapter_detail
