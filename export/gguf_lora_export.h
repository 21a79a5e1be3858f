// glm4 export gguf-lora: a LoRA adapter in llama.cpp's adapter format, as convert_lora_to_gguf.py
// writes it: general.type = adapter, adapter.type = lora, adapter.lora.alpha, and for each adapted
// weight "<gguf weight name>.lora_a" (A, [r, in], ggml dims {in, r}) and ".lora_b" (B, [out, r]).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "export/gguf_format.h"
#include "model/config.h"

namespace glm4 {

// One adapted linear module in PEFT orientation.
struct GgufLoraModule {
  std::string module;  // "model.layers.3.self_attn.q_proj"
  int64_t rank = 0;
  int64_t in = 0, out = 0;
  std::vector<float> a;  // [rank, in]
  std::vector<float> b;  // [out, rank]
};

struct GgufLoraExportResult {
  int64_t tensors = 0;
  double alpha = 0;  // adapter.lora.alpha as written
  std::vector<std::string> notes;
};

// llama.cpp scales B A by alpha / rank with rank = the columns of B. `scale` is the adapter's own
// (alpha / r, or alpha / sqrt(r) with rsLoRA), so alpha is written as scale * r, which keeps
// rsLoRA exact. ChatGLM keeps q|k|v in one attn_qkv: its q/k/v adapters become one adapter of
// rank (parts * r) with A stacked and B block-diagonal (B scaled by the parts so the rank in
// llama.cpp's divisor cancels). glm4_moe's per-expert adapters of one projection become one
// stacked pair (A {in, R, experts}, B {R, out, experts}; R the largest rank, smaller ones and
// experts without an adapter zero padded), which llama.cpp applies per chosen expert. Throws
// naming the module whose shapes do not fit config `c`, and for glm4_moe_lite (deepseek2) naming
// an adapter on q / q_a / q_b / kv_a / kv_b, which llama.cpp would load and never apply.
GgufLoraExportResult export_gguf_lora(const ModelConfig& c,
                                      const std::vector<GgufLoraModule>& modules, double scale,
                                      const std::string& name, const std::filesystem::path& out,
                                      GgmlType type);

}  // namespace glm4
