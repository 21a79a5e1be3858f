// Internals shared by the config reader, validator and writer (not part of the public API).
#pragma once
#include <nlohmann/json.hpp>
#include <optional>

#include "model/config.h"

namespace glm4::config_detail {

// The family a config.json describes, or nullopt when neither `architectures` nor
// `model_type` names a supported one. Never throws.
std::optional<ModelConfig::Family> family_of(const nlohmann::json& j);

// Class defaults of the reference configs (transformers GlmConfig/Glm4Config, THUDM ChatGLMConfig).
inline const std::vector<int32_t> kGlmDefaultEos = {151329, 151336, 151338};
inline constexpr int32_t kGlmDefaultPad = 151329;
inline constexpr double kChatGlmRopeBase = 10000.0;  // rope_theta = kChatGlmRopeBase * rope_ratio

}  // namespace glm4::config_detail
