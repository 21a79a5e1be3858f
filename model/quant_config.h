// The "quantization" section of an mlx config.json (mlx-lm writes it twice, also as
// "quantization_config"): the default affine format and per-module overrides by module path.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "autograd/kernels/quantized_matrix.h"

namespace glm4 {

struct QuantConfig {
  QuantFormat format;  // the default: {"group_size": 64, "bits": 4, "mode": "affine"}
  // Module path ("model.layers.0.mlp.down_proj", "lm_head", "model.embed_tokens") -> its own
  // format, or nullopt for `false` (the module stays unquantized).
  std::map<std::string, std::optional<QuantFormat>> modules;

  bool operator==(const QuantConfig&) const = default;
  // The override for `module`, or nullptr when it has none.
  const std::optional<QuantFormat>* override_for(const std::string& module) const;
};

// Reads the object `j` found under `field` ("quantization" or "quantization_config") of
// `source`. Keys group_size, bits and mode (absent or "affine") give the default; every other
// key is a module path whose value is an object with group_size / bits / mode (missing ones
// taken from the default), `true` (the default) or `false`. Throws naming the source and the
// field: bits outside 2-8 or not one of 2, 3, 4, 5, 6, 8, a group size other than 32, 64 or
// 128, a mode other than affine, a wrong type.
QuantConfig parse_quant_config(const nlohmann::json& j, const std::string& source,
                               const std::string& field);

// The object mlx-lm writes: group_size, bits, mode "affine", then the overrides (an object with
// group_size and bits, or false).
nlohmann::json quant_config_json(const QuantConfig& q);

}  // namespace glm4
