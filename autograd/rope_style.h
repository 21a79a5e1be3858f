// Which dims RoPE rotates together: GLM-4-0414 / GLM / ChatGLM pair (2i, 2i+1); GLM-4.5
// (glm4_moe, transformers' rotate_half) pairs i with i + rotary_dim / 2. And the frequencies
// each pair turns at.
#pragma once
#include <vector>

namespace glm4 {

enum class RopeStyle { Interleaved, RotateHalf };

// Pair i turns by position * inv_freq[i] (rotary_dim / 2 of them); cos and sin are multiplied by
// `scale` (YaRN's attention factor, 1 for the default RoPE), as transformers scales its tables.
struct RopeFrequencies {
  std::vector<float> inv_freq;
  float scale = 1.0f;
};

}  // namespace glm4
