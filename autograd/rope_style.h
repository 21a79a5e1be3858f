// Which dims RoPE rotates together: GLM-4-0414 / GLM / ChatGLM pair (2i, 2i+1); GLM-4.5
// (glm4_moe, transformers' rotate_half) pairs i with i + rotary_dim / 2.
#pragma once

namespace glm4 {

enum class RopeStyle { Interleaved, RotateHalf };

}  // namespace glm4
