// LoRA adapter export: shape checks against the base config, ChatGLM's q/k/v fused into one
// attn_qkv adapter, glm4_moe's per-expert adapters stacked like the experts, metadata, then
// lora_a / lora_b per weight.
#include "export/gguf_lora_export.h"

#include <algorithm>
#include <map>

#include "base/check.h"
#include "export/ggml_quants.h"
#include "export/gguf_tensor_map.h"
#include "export/gguf_writer.h"

namespace glm4 {
namespace {

struct LoraPair {
  std::string base;  // GGUF weight name
  int64_t rank = 0, in = 0, out = 0;
  std::vector<float> a, b;  // [experts,] rank, in and [experts,] out, rank
  int64_t experts = 0;      // 0: a plain 2-D pair; else stacked as the base's experts
};

// The hidden width of the MLP a glm4_moe module belongs to: a routed expert's, the shared
// experts' (moe_intermediate_size * n_shared_experts) or the dense MLP's.
int64_t mlp_width(const ModelConfig& c, const std::string& module) {
  if (module.find(".shared_experts.") != std::string::npos)
    return c.moe_intermediate_size * c.n_shared_experts;
  if (module.find(".experts.") != std::string::npos) return c.moe_intermediate_size;
  return c.intermediate_size;
}

// Output rows of our linear modules for config c.
int64_t module_out(const ModelConfig& c, const std::string& module) {
  const int64_t q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  auto has = [&](const char* s) {
    return module.size() >= std::string(s).size() &&
           module.compare(module.size() - std::string(s).size(), std::string::npos, s) == 0;
  };
  if (has("q_proj")) return q;
  if (has("k_proj") || has("v_proj")) return kv;
  if (has("o_proj") || has("down_proj")) return c.hidden_size;
  if (has("gate_up_proj")) return 2 * c.intermediate_size;
  if (has("gate_proj") || has("up_proj")) return mlp_width(c, module);
  fail("gguf-lora export: '", module, "' is not a LoRA module of this model");
}

int64_t module_in(const ModelConfig& c, const std::string& module) {
  if (module.find("o_proj") != std::string::npos)
    return c.num_attention_heads * (has_latent_attention(c) ? c.v_head_dim : c.head_dim);
  if (module.find("down_proj") != std::string::npos) return mlp_width(c, module);
  return c.hidden_size;
}

// glm4_moe: the adapters of one projection's routed experts as one stacked pair, A [E, R, in] and
// B [E, out, R], which llama.cpp applies per chosen expert as it does the stacked weights. R is
// the largest rank among them: smaller ranks are padded with zero rows of A and zero columns of
// B, and experts without an adapter are all zero. llama.cpp scales by alpha / R with alpha =
// scale * `rank`, so B is multiplied by R / rank to keep every expert's delta scale * B A.
LoraPair stack_experts(const std::string& base, const std::vector<const GgufLoraModule*>& experts,
                       int64_t rank) {
  LoraPair p;
  p.base = base;
  p.experts = int64_t(experts.size());
  for (const GgufLoraModule* m : experts) {
    if (!m) continue;
    p.rank = std::max(p.rank, m->rank);
    p.in = m->in;
    p.out = m->out;
  }
  const size_t E = size_t(p.experts), R = size_t(p.rank), in = size_t(p.in), out = size_t(p.out);
  p.a.assign(E * R * in, 0.0f);
  p.b.assign(E * out * R, 0.0f);
  const float factor = float(double(p.rank) / double(rank));
  for (size_t e = 0; e < E; ++e) {
    const GgufLoraModule* m = experts[e];
    if (!m) continue;
    const size_t r = size_t(m->rank);
    std::copy(m->a.begin(), m->a.end(), p.a.begin() + long(e * R * in));  // rows 0..r of A
    for (size_t o = 0; o < out; ++o)
      for (size_t j = 0; j < r; ++j) p.b[(e * out + o) * R + j] = m->b[o * r + j] * factor;
  }
  return p;
}

// ChatGLM: one adapter over q|k|v. A = [A_q; A_k; A_v] (the parts present), B block-diagonal
// with each part's rows at its offset in the fused output, multiplied by the number of parts.
LoraPair fuse_qkv(const ModelConfig& c, const std::string& base,
                  const std::vector<const GgufLoraModule*>& parts, const std::vector<int>& which) {
  const int64_t q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  const int64_t offsets[3] = {0, q, q + kv};
  LoraPair p;
  p.base = base;
  p.in = c.hidden_size;
  p.out = q + 2 * kv;
  for (const GgufLoraModule* m : parts) p.rank += m->rank;
  p.b.assign(size_t(p.out * p.rank), 0.0f);
  const float factor = float(parts.size());
  int64_t col = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    const GgufLoraModule& m = *parts[k];
    p.a.insert(p.a.end(), m.a.begin(), m.a.end());
    for (int64_t r = 0; r < m.out; ++r)
      for (int64_t j = 0; j < m.rank; ++j)
        p.b[size_t((offsets[which[k]] + r) * p.rank + col + j)] =
            m.b[size_t(r * m.rank + j)] * factor;
    col += m.rank;
  }
  return p;
}

}  // namespace

GgufLoraExportResult export_gguf_lora(const ModelConfig& c,
                                      const std::vector<GgufLoraModule>& modules, double scale,
                                      const std::string& name, const std::filesystem::path& out,
                                      GgmlType type) {
  GLM4_CHECK(type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16,
             "gguf-lora export: --type ", ggml_type_name(type),
             " is not supported for adapters (f32, f16, bf16)");
  GLM4_CHECK(!modules.empty(), "gguf-lora export: the adapter has no modules");
  if (has_latent_attention(c)) {
    // llama.cpp's deepseek2 graph multiplies these with ggml_mul_mat, not build_lora_mm: an
    // adapter on them would load and do nothing. kv_b_proj is also split into attn_k_b / attn_v_b
    // (k_b transposed), which an adapter of rank r could follow only as two adapters of rank r.
    for (const GgufLoraModule& m : modules) {
      for (const char* p : {"q_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"}) {
        const std::string s = std::string(".") + p;
        GLM4_CHECK(m.module.size() < s.size() ||
                       m.module.compare(m.module.size() - s.size(), s.size(), s) != 0,
                   "gguf-lora export: llama.cpp's deepseek2 (glm4_moe_lite) applies no LoRA to ", p,
                   " ('", m.module,
                   "'); only o_proj and the MLPs can stay adapters: merge the adapter instead "
                   "(glm4 export gguf --adapter)");
      }
    }
  }
  const int64_t rank = modules.front().rank;
  GgufLoraExportResult result;
  result.alpha = scale * double(rank);

  std::vector<LoraPair> pairs;
  std::map<std::string, std::vector<std::pair<int, const GgufLoraModule*>>> fused;  // base -> parts
  std::vector<std::string> order;
  std::map<std::string, std::vector<const GgufLoraModule*>> experts;  // base -> adapter per expert
  for (const GgufLoraModule& m : modules) {
    GLM4_CHECK(m.rank > 0 && m.in == module_in(c, m.module) && m.out == module_out(c, m.module) &&
                   int64_t(m.a.size()) == m.rank * m.in && int64_t(m.b.size()) == m.out * m.rank,
               "gguf-lora export: '", m.module, "' has A [", m.rank, ", ", m.in, "] and B [", m.out,
               ", ", m.rank, "], which do not fit the base model (in ", module_in(c, m.module),
               ", out ", module_out(c, m.module), "): adapter made for another model?");
    int part = -1;
    bool expert = false;
    const std::string base = gguf_weight_name(c, m.module, &part, &expert);
    if (expert) {
      auto& stack = experts[base];
      if (stack.empty()) {
        stack.resize(size_t(c.n_routed_experts));
        order.push_back(base);
      }
      GLM4_CHECK(part < c.n_routed_experts && !stack[size_t(part)], "gguf-lora export: '", m.module,
                 "' is not an expert of this model (n_routed_experts = ", c.n_routed_experts,
                 ") or comes twice");
      stack[size_t(part)] = &m;
      continue;
    }
    if (part < 0) {
      LoraPair p{base, m.rank, m.in, m.out, m.a, m.b};
      if (m.rank != rank) {  // llama.cpp divides by this module's rank: rescale B to keep `scale`
        for (float& x : p.b) x *= float(double(m.rank) / double(rank));
      }
      pairs.push_back(std::move(p));
      order.push_back(base);
      continue;
    }
    if (!fused.count(base)) order.push_back(base);
    fused[base].emplace_back(part, &m);
  }
  for (auto& [base, parts] : fused) {
    std::sort(parts.begin(), parts.end());
    std::vector<const GgufLoraModule*> ms;
    std::vector<int> which;
    for (const auto& [part, m] : parts) {
      GLM4_CHECK(m->rank == rank, "gguf-lora export: '", m->module, "' has rank ", m->rank,
                 "; fusing q/k/v needs one rank (", rank, ")");
      ms.push_back(m);
      which.push_back(part);
    }
    pairs.push_back(fuse_qkv(c, base, ms, which));
  }
  int64_t missing = 0;
  for (const auto& [base, stack] : experts) {
    missing += std::count(stack.begin(), stack.end(), nullptr);
    pairs.push_back(stack_experts(base, stack, rank));
  }
  if (missing > 0) {
    result.notes.push_back(str_cat("llama.cpp stacks the experts: ", missing,
                                   " expert projections without an adapter were written as zero "
                                   "(no change) in their layer's stacked lora_a / lora_b"));
  }
  if (!fused.empty()) {
    result.notes.push_back(
        str_cat("ChatGLM keeps q|k|v in one attn_qkv: its q/k/v adapters were written as one "
                "block-diagonal adapter per layer (rank up to ",
                3 * rank, ")"));
  }

  // llama.cpp's glm4 and glm4moe graphs set f32 precision on what build_lora_mm returns for
  // attn_output and (dense or shared) ffn_down; with a LoRA that is an add, not a matmul.
  if (c.family == ModelConfig::Family::Glm4 || c.family == ModelConfig::Family::Glm4Moe) {
    for (const GgufLoraModule& m : modules) {
      const bool routed = m.module.find(".experts.") != std::string::npos &&
                          m.module.find(".shared_experts.") == std::string::npos;
      if (routed || (m.module.find("o_proj") == std::string::npos &&
                     m.module.find("down_proj") == std::string::npos))
        continue;
      result.notes.push_back(str_cat(
          "llama.cpp's ", gguf_arch_name(c),
          " graph asserts in ggml_mul_mat_set_prec when a LoRA adapts attn_output or ffn_down",
          c.family == ModelConfig::Family::Glm4Moe ? " / ffn_down_shexp" : "", " (", m.module,
          " here; seen at llama.cpp 81ff7abe and d32676d7); if it stops there, merge the adapter "
          "instead: glm4 export gguf --adapter"));
      break;
    }
  }

  GgufWriter w;
  w.set("general.architecture", GgufValue::of_string(gguf_arch_name(c)));
  w.set("general.type", GgufValue::of_string("adapter"));
  w.set("adapter.type", GgufValue::of_string("lora"));
  w.set("general.name", GgufValue::of_string(name));
  w.set("adapter.lora.alpha", GgufValue::of_f32(float(result.alpha)));
  w.set("general.quantization_version", GgufValue::of_u32(kGgmlQuantVersion));
  for (const std::string& base : order) {
    for (const LoraPair& p : pairs) {
      if (p.base != base) continue;
      const LoraPair* pp = &p;
      std::vector<int64_t> ne_a = {p.in, p.rank}, ne_b = {p.rank, p.out};
      if (p.experts > 0) ne_a.push_back(p.experts), ne_b.push_back(p.experts);
      w.add_tensor(base + ".lora_a", ne_a, type, [pp, type] {
        std::vector<uint8_t> bytes;
        ggml_encode(type, pp->a.data(), int64_t(pp->a.size()), bytes);
        return bytes;
      });
      w.add_tensor(base + ".lora_b", ne_b, type, [pp, type] {
        std::vector<uint8_t> bytes;
        ggml_encode(type, pp->b.data(), int64_t(pp->b.size()), bytes);
        return bytes;
      });
    }
  }
  result.tensors = int64_t(w.tensor_count());
  w.write(out);
  return result;
}

}  // namespace glm4
