// deepseek2 names and the kv_b_proj split / rotary row order of glm4_moe_lite's GGUF export
// (llama.cpp's DeepseekV2Model.modify_tensors and its deepseek2 graph).
#include "export/gguf_mla.h"

#include <algorithm>
#include <map>

#include "base/check.h"

namespace glm4 {

std::string deepseek2_layer_name(const std::string& rest, const std::string& name) {
  static const std::map<std::string, std::string> kLite = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
      {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"},
      {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
      {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
      {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
      {"self_attn.kv_b_proj.weight", "attn_kv_b.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
  };
  if (auto it = kLite.find(rest); it != kLite.end()) return it->second;
  const std::string bias = ".bias";
  GLM4_CHECK(!(rest.rfind("self_attn.", 0) == 0 && rest.size() > bias.size() &&
               rest.compare(rest.size() - bias.size(), bias.size(), bias) == 0),
             "gguf export: llama.cpp's deepseek2 has no attention biases, so '", name,
             "' (attention_bias true) cannot be exported");
  return "";
}

std::vector<int64_t> rope_row_order(const ModelConfig& c, GgufReshape how, int64_t rows) {
  std::vector<int64_t> order(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) order[size_t(i)] = i;
  if (c.rope_style != RopeStyle::RotateHalf) return order;
  const int64_t d = c.qk_rope_head_dim, half = d / 2;
  // Rotate-half pairs row j with row j + d/2 (frequency j); llama.cpp's deepseek2 rotates
  // adjacent pairs (2j, 2j + 1) with frequency j, so row 2j takes j and row 2j + 1 takes j + d/2.
  auto reorder = [&](int64_t start) {
    for (int64_t j = 0; j < half; ++j) {
      order[size_t(start + 2 * j)] = start + j;
      order[size_t(start + 2 * j + 1)] = start + half + j;
    }
  };
  if (how == GgufReshape::RopeRowsKv) {
    reorder(c.kv_lora_rank);
  } else if (how == GgufReshape::RopeRowsQ) {
    const int64_t head = c.qk_nope_head_dim + d;
    for (int64_t h = 0; h < c.num_attention_heads; ++h) reorder(h * head + c.qk_nope_head_dim);
  }
  return order;
}

std::vector<float> gguf_reshape(const ModelConfig& c, GgufReshape how, const float* src,
                                int64_t numel) {
  const int64_t H = c.num_attention_heads, nope = c.qk_nope_head_dim, v = c.v_head_dim;
  const int64_t lora = c.kv_lora_rank;
  std::vector<float> out(static_cast<size_t>(numel));
  switch (how) {
    case GgufReshape::None:
      std::copy(src, src + numel, out.begin());
      break;
    case GgufReshape::KvbKeys:  // k_b[h][l][n] = kv_b[h * (nope + v) + n][l]
    case GgufReshape::KvbValues: {
      GLM4_CHECK(numel == H * (nope + v) * lora, "gguf export: kv_b_proj has ", numel,
                 " values, not heads * (qk_nope + v) * kv_lora_rank = ", H * (nope + v) * lora);
      size_t k = 0;
      for (int64_t h = 0; h < H; ++h) {
        const float* head = src + h * (nope + v) * lora;
        if (how == GgufReshape::KvbKeys) {
          for (int64_t l = 0; l < lora; ++l)
            for (int64_t n = 0; n < nope; ++n) out[k++] = head[n * lora + l];
        } else {  // v_b[h][j][l] = kv_b[h * (nope + v) + nope + j][l]
          for (int64_t j = 0; j < v * lora; ++j) out[k++] = head[nope * lora + j];
        }
      }
      out.resize(k);
      break;
    }
    case GgufReshape::RopeRowsQ:
    case GgufReshape::RopeRowsKv: {
      const int64_t rows = how == GgufReshape::RopeRowsKv ? lora + c.qk_rope_head_dim
                                                          : H * (nope + c.qk_rope_head_dim);
      GLM4_CHECK(numel % rows == 0, "gguf export: ", numel, " values are not ", rows, " rows");
      const int64_t cols = numel / rows;
      const std::vector<int64_t> order = rope_row_order(c, how, rows);
      for (int64_t r = 0; r < rows; ++r)
        std::copy(src + order[size_t(r)] * cols, src + (order[size_t(r)] + 1) * cols,
                  out.begin() + r * cols);
      break;
    }
  }
  return out;
}

}  // namespace glm4
