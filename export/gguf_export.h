// glm4 export gguf: a model (with any adapter already merged) as one GGUF file that llama.cpp
// loads, with the architecture, hyperparameter keys, tensor names, tensor types and tokenizer
// metadata that llama.cpp's convert_hf_to_gguf.py writes for the same Hugging Face directory.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "export/gguf_format.h"
#include "model/glm4_model.h"

namespace glm4 {

struct GgufExportResult {
  std::string arch;  // general.architecture
  int64_t tensors = 0;
  int64_t parameters = 0;
  std::vector<std::string> notes;  // fallbacks and deviations from the converter, for the user
};

// Writes `model` to `out` (atomically). Matrices are stored as `type`; 1-D tensors, norms and
// biases stay F32 whatever the type (as the converter does); a matrix whose rows are not a
// multiple of 32 values cannot be q8_0/q4_0 and is written F16 (the converter's fallback), with
// a note. q4_0 applies to every matrix, token_embd and output included (llama-quantize --pure).
// The tokenizer comes from `model_dir`. Throws naming the tensor, key or file at fault, and for
// a chatglm model whose heads * head_dim != hidden (llama.cpp's chatglm cannot load it) or a
// glm4_moe_lite model with attention biases (llama.cpp's deepseek2 has none).
GgufExportResult export_gguf_model(Glm4Model& model, const std::filesystem::path& model_dir,
                                   const std::filesystem::path& out, GgmlType type);

// gguf-py's size label: 5.2M, 9.4B, 151K (two significant digits at least).
std::string gguf_size_label(int64_t parameters);

// The GGUF tensor type the converter picks for a tensor of `shape` named `name` when `type` is
// asked; *fell_back is set when a quantized type had to become F16.
GgmlType gguf_tensor_type(const std::string& name, const std::vector<int64_t>& shape, GgmlType type,
                          bool* fell_back);

}  // namespace glm4
