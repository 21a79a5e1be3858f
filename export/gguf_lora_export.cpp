// LoRA adapter export: shape checks against the base config, ChatGLM's q/k/v fused into one
// attn_qkv adapter, metadata, then lora_a / lora_b per weight.
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
  std::vector<float> a, b;
};

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
  fail("gguf-lora export: '", module, "' is not a LoRA module of this model");
}

int64_t module_in(const ModelConfig& c, const std::string& module) {
  if (module.find("o_proj") != std::string::npos) return c.num_attention_heads * c.head_dim;
  if (module.find("down_proj") != std::string::npos) return c.intermediate_size;
  return c.hidden_size;
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
  GLM4_CHECK(c.family != ModelConfig::Family::Glm4Moe,
             "gguf-lora export: glm4_moe adapters are not supported yet");
  const int64_t rank = modules.front().rank;
  GgufLoraExportResult result;
  result.alpha = scale * double(rank);

  std::vector<LoraPair> pairs;
  std::map<std::string, std::vector<std::pair<int, const GgufLoraModule*>>> fused;  // base -> parts
  std::vector<std::string> order;
  for (const GgufLoraModule& m : modules) {
    GLM4_CHECK(m.rank > 0 && m.in == module_in(c, m.module) && m.out == module_out(c, m.module) &&
                   int64_t(m.a.size()) == m.rank * m.in && int64_t(m.b.size()) == m.out * m.rank,
               "gguf-lora export: '", m.module, "' has A [", m.rank, ", ", m.in, "] and B [", m.out,
               ", ", m.rank, "], which do not fit the base model (in ", module_in(c, m.module),
               ", out ", module_out(c, m.module), "): adapter made for another model?");
    int part = -1;
    const std::string base = gguf_weight_name(c, m.module, &part);
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
  if (!fused.empty()) {
    result.notes.push_back(
        str_cat("ChatGLM keeps q|k|v in one attn_qkv: its q/k/v adapters were written as one "
                "block-diagonal adapter per layer (rank up to ",
                3 * rank, ")"));
  }

  if (c.family == ModelConfig::Family::Glm4) {
    for (const GgufLoraModule& m : modules) {
      if (m.module.find("o_proj") == std::string::npos &&
          m.module.find("down_proj") == std::string::npos)
        continue;
      result.notes.push_back(
          "llama.cpp's glm4 graph (checked at commit 81ff7abe) asserts in ggml_mul_mat_set_prec "
          "when a LoRA "
          "adapts attn_output or ffn_down; if it stops there, merge the adapter instead: glm4 "
          "export gguf --adapter");
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
      w.add_tensor(base + ".lora_a", {p.in, p.rank}, type, [pp, type] {
        std::vector<uint8_t> bytes;
        ggml_encode(type, pp->a.data(), int64_t(pp->a.size()), bytes);
        return bytes;
      });
      w.add_tensor(base + ".lora_b", {p.rank, p.out}, type, [pp, type] {
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
