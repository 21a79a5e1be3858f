// Model export: general.* keys, the family's hyperparameters under its architecture name, the
// tokenizer, then every tensor converted from fp32 one at a time while the file is written.
#include "export/gguf_export.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "base/check.h"
#include "export/ggml_quants.h"
#include "export/gguf_tensor_map.h"
#include "export/gguf_vocab.h"
#include "export/gguf_writer.h"
#include "export/gguf_yarn.h"

namespace glm4 {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void set_u32(GgufWriter& w, const std::string& key, int64_t v) {
  GLM4_CHECK(v >= 0 && v <= int64_t(UINT32_MAX), "gguf export: ", key, " = ", v,
             " does not fit uint32");
  w.set(key, GgufValue::of_u32(uint32_t(v)));
}

// TextModel.set_gguf_parameters' first keys, under the architecture prefix `a`.
void text_model_keys(const ModelConfig& c, GgufWriter& w, const std::string& a) {
  set_u32(w, a + "block_count", c.num_hidden_layers);
  set_u32(w, a + "context_length", c.max_position_embeddings);
  set_u32(w, a + "embedding_length", c.hidden_size);
  set_u32(w, a + "feed_forward_length", c.intermediate_size);
  set_u32(w, a + "attention.head_count", c.num_attention_heads);
  set_u32(w, a + "attention.head_count_kv", c.num_key_value_heads);
  w.set(a + "rope.freq_base", GgufValue::of_f32(float(c.rope_theta)));
  w.set(a + "attention.layer_norm_rms_epsilon", GgufValue::of_f32(float(c.rms_norm_eps)));
}

// The head sizes (the converter writes them when config.json has head_dim; llama.cpp otherwise
// assumes hidden / heads, so they are needed whenever that differs), the file type and the
// rotary dimension count.
void head_and_rope_keys(const ModelConfig& c, GgufWriter& w, const std::string& a, GgmlType type) {
  if (c.raw.contains("head_dim") || c.head_dim * c.num_attention_heads != c.hidden_size) {
    set_u32(w, a + "attention.key_length", c.head_dim);
    set_u32(w, a + "attention.value_length", c.head_dim);
  }
  set_u32(w, "general.file_type", llama_file_type(type));
  set_u32(w, a + "rope.dimension_count", c.rotary_dim);
}

// TextModel.set_gguf_parameters + Glm4Model's rope dimension count.
void glm4_hparams(const ModelConfig& c, GgufWriter& w, GgmlType type) {
  const std::string a = "glm4.";
  text_model_keys(c, w, a);
  head_and_rope_keys(c, w, a, type);
}

// TextModel's expert and expert group counts. llama.cpp asserts expert_group_used_count <
// expert_group_count when there are groups; keeping every group is the same choice as one group.
void expert_count_keys(const ModelConfig& c, GgufWriter& w, const std::string& a,
                       std::vector<std::string>& notes) {
  set_u32(w, a + "expert_count", c.n_routed_experts);
  set_u32(w, a + "expert_used_count", c.num_experts_per_tok);
  int64_t groups = c.n_group, groups_used = c.topk_group;
  if (groups > 1 && groups_used >= groups) {
    notes.push_back(str_cat("topk_group ", c.topk_group, " keeps all ", c.n_group,
                            " expert groups: written as one group (llama.cpp refuses "
                            "expert_group_used_count >= expert_group_count)"));
    groups = groups_used = 1;
  }
  set_u32(w, a + "expert_group_count", groups);
  set_u32(w, a + "expert_group_used_count", groups_used);
}

// Glm4MoeModel.set_gguf_parameters: TextModel's keys (expert and group counts among them), then
// the rope dimension count and the MoE keys. The MTP layers are not exported (glm4 never loads
// them), so block_count is num_hidden_layers and nextn_predict_layers 0.
void glm4moe_hparams(const ModelConfig& c, GgufWriter& w, GgmlType type,
                     std::vector<std::string>& notes) {
  const std::string a = "glm4moe.";
  text_model_keys(c, w, a);
  expert_count_keys(c, w, a, notes);
  head_and_rope_keys(c, w, a, type);
  set_u32(w, a + "expert_feed_forward_length", c.moe_intermediate_size);
  set_u32(w, a + "expert_shared_count", c.n_shared_experts);
  set_u32(w, a + "leading_dense_block_count", c.first_k_dense_replace);
  set_u32(w, a + "expert_gating_func", 2);  // llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID
  w.set(a + "expert_weights_scale", GgufValue::of_f32(float(c.routed_scaling_factor)));
  w.set(a + "expert_weights_norm", GgufValue::of_bool(c.norm_topk_prob));
  set_u32(w, a + "nextn_predict_layers", 0);
  if (c.num_nextn_predict_layers > 0) {
    notes.push_back(str_cat("the model's ", c.num_nextn_predict_layers,
                            " MTP (nextn) layer(s) are not exported (glm4 does not load them; "
                            "llama.cpp only needs them for speculative decoding)"));
  }
}

// DeepseekV2Model.set_gguf_parameters for Glm4MoeLiteModel: latent attention as MQA with one kv
// head of kv_lora + rope (values kv_lora), the per-head sizes under the _mla keys. Beyond the
// converter: expert_gating_func (llama.cpp assumes softmax unless 47/48 layers and vocab
// 154880), q_lora_rank 0 for a q_proj model (the key is required outside llama.cpp's "lite" layer
// counts) and nextn_predict_layers 0 (the MTP layers are left out, as for glm4moe).
void deepseek2_hparams(const ModelConfig& c, GgufWriter& w, GgmlType type,
                       std::vector<std::string>& notes) {
  const std::string a = "deepseek2.";
  set_u32(w, a + "block_count", c.num_hidden_layers);
  set_u32(w, a + "context_length", c.max_position_embeddings);
  set_u32(w, a + "embedding_length", c.hidden_size);
  set_u32(w, a + "feed_forward_length", c.intermediate_size);
  set_u32(w, a + "attention.head_count", c.num_attention_heads);
  set_u32(w, a + "attention.head_count_kv", 1);
  w.set(a + "rope.freq_base", GgufValue::of_f32(float(c.rope_theta)));
  w.set(a + "attention.layer_norm_rms_epsilon", GgufValue::of_f32(float(c.rms_norm_eps)));
  expert_count_keys(c, w, a, notes);
  set_u32(w, "general.file_type", llama_file_type(type));
  set_u32(w, a + "leading_dense_block_count", c.first_k_dense_replace);
  set_u32(w, a + "vocab_size", c.vocab_size);
  set_u32(w, a + "attention.q_lora_rank", c.q_lora_rank);
  set_u32(w, a + "attention.kv_lora_rank", c.kv_lora_rank);
  set_u32(w, a + "attention.key_length", c.kv_lora_rank + c.qk_rope_head_dim);
  set_u32(w, a + "attention.value_length", c.kv_lora_rank);
  set_u32(w, a + "attention.key_length_mla", c.qk_nope_head_dim + c.qk_rope_head_dim);
  set_u32(w, a + "attention.value_length_mla", c.v_head_dim);
  set_u32(w, a + "expert_feed_forward_length", c.moe_intermediate_size);
  set_u32(w, a + "expert_shared_count", c.n_shared_experts);
  w.set(a + "expert_weights_scale", GgufValue::of_f32(float(c.routed_scaling_factor)));
  w.set(a + "expert_weights_norm", GgufValue::of_bool(c.norm_topk_prob));
  set_u32(w, a + "rope.dimension_count", c.qk_rope_head_dim);
  set_u32(w, a + "expert_gating_func", 2);  // llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID
  set_u32(w, a + "nextn_predict_layers", 0);
  if (c.num_nextn_predict_layers > 0) {
    notes.push_back(str_cat("the model's ", c.num_nextn_predict_layers,
                            " MTP (nextn) layer(s) are not exported (glm4 does not load them; "
                            "llama.cpp only needs them for speculative decoding)"));
  }
  if (float(c.rms_norm_eps) != 1e-6f) {
    notes.push_back(str_cat("llama.cpp's deepseek2 normalises q_a / kv_a with rms_norm_eps ",
                            c.rms_norm_eps, "; glm4 (as transformers) uses 1e-6 there"));
  }
  const int64_t layers = c.num_hidden_layers;
  if (c.q_lora_rank > 0 &&
      (layers == 26 || layers == 27 || (layers == 48 && c.vocab_size == 128256))) {
    notes.push_back(str_cat("llama.cpp takes a deepseek2 model of ", layers,
                            " layers for a DeepSeek-V2-Lite without q_lora_rank and will look for "
                            "attn_q instead of attn_q_a / attn_q_b: it will not load this file"));
  }
}

// ChatGLMModel.set_gguf_parameters (also used for GlmForCausalLM). We write the model's own
// values; where the converter's ChatGLM-only lookups would give others, a note says so.
void chatglm_hparams(const ModelConfig& c, GgufWriter& w, GgmlType type,
                     std::vector<std::string>& notes) {
  const std::string a = "chatglm.";
  GLM4_CHECK(
      c.num_attention_heads * c.head_dim == c.hidden_size,
      "gguf export: llama.cpp's chatglm "
      "needs heads * head_dim == hidden_size (its attn_output is hidden x hidden); this model has ",
      c.num_attention_heads, " * ", c.head_dim, " != ", c.hidden_size);
  set_u32(w, a + "context_length", c.max_position_embeddings);
  set_u32(w, a + "embedding_length", c.hidden_size);
  set_u32(w, a + "feed_forward_length", c.intermediate_size);
  set_u32(w, a + "block_count", c.num_hidden_layers);
  set_u32(w, a + "attention.head_count", c.num_attention_heads);
  set_u32(w, a + "attention.head_count_kv", c.num_key_value_heads);
  w.set(a + "attention.layer_norm_rms_epsilon", GgufValue::of_f32(float(c.rms_norm_eps)));
  set_u32(w, "general.file_type", llama_file_type(type));
  set_u32(w, a + "rope.dimension_count", c.rotary_dim);
  w.set(a + "rope.freq_base", GgufValue::of_f32(float(c.rope_theta)));
  if (c.family == ModelConfig::Family::Glm) {
    const double converter_eps = c.raw.value("layernorm_epsilon", 1e-5);
    const double converter_base = 10000.0 * c.raw.value("rope_ratio", 1.0);
    const int64_t converter_ctx = c.raw.value("seq_length", c.hidden_size);
    if (float(converter_eps) != float(c.rms_norm_eps) ||
        float(converter_base) != float(c.rope_theta) ||
        converter_ctx != c.max_position_embeddings) {
      notes.push_back(
          str_cat("GlmForCausalLM: llama.cpp's converter reads ChatGLM's config keys and would "
                  "write eps ",
                  converter_eps, ", rope base ", converter_base, ", context ", converter_ctx,
                  "; written are the model's eps ", c.rms_norm_eps, ", rope base ", c.rope_theta,
                  ", context ", c.max_position_embeddings));
    }
  }
}

// The tensor's bytes as `type`: its sources (ChatGLM's q|k|v, glm4_moe's experts, or one
// tensor) converted to fp32 and encoded one at a time, so a stack of experts never sits in memory
// as fp32 whole. Every source is whole rows, and a row is whole blocks, so the bytes just append.
std::vector<uint8_t> encode_sources(const ModelConfig& c, const GgufTensorPlan& t, GgmlType type,
                                    const std::map<std::string, Param*>& params) {
  std::vector<uint8_t> out;
  for (const std::string& src : t.sources) {
    const Tensor v = params.at(src)->to_f32();
    if (t.reshape == GgufReshape::None) {
      ggml_encode(type, v.data(), v.numel(), out);
    } else {
      const std::vector<float> r = gguf_reshape(c, t.reshape, v.data(), v.numel());
      ggml_encode(type, r.data(), int64_t(r.size()), out);
    }
  }
  return out;
}

}  // namespace

std::string gguf_size_label(int64_t n) {
  double scaled;
  const char* suffix;
  if (n > 1e12)
    scaled = double(n) * 1e-12, suffix = "T";
  else if (n > 1e9)
    scaled = double(n) * 1e-9, suffix = "B";
  else if (n > 1e6)
    scaled = double(n) * 1e-6, suffix = "M";
  else
    scaled = double(n) * 1e-3, suffix = "K";
  std::string whole =
      std::to_string(int64_t(std::nearbyint(scaled)));  // Python's round: ties to even
  whole.erase(0, whole.find_first_not_of('0') == std::string::npos ? whole.size()
                                                                   : whole.find_first_not_of('0'));
  const int decimals = std::max(2 - int(whole.size()), 0);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f%s", decimals, scaled, suffix);
  return buf;
}

GgmlType gguf_tensor_type(const std::string& name, const std::vector<int64_t>& shape, GgmlType type,
                          bool* fell_back) {
  *fell_back = false;
  // The router (ffn_gate_inp) stays F32 too, as the converter and llama-quantize keep it.
  if (shape.size() <= 1 || ends_with(name, "_norm.weight") || !ends_with(name, ".weight") ||
      ends_with(name, "ffn_gate_inp.weight"))
    return GgmlType::F32;
  if (shape.back() % ggml_block_size(type) != 0) {
    *fell_back = true;
    return GgmlType::F16;
  }
  return type;
}

GgufExportResult export_gguf_model(Glm4Model& model, const std::filesystem::path& model_dir,
                                   const std::filesystem::path& out, GgmlType type) {
  const ModelConfig& c = model.config;
  GgufExportResult result;
  result.arch = gguf_arch_name(c);

  std::map<std::string, Param*> params;
  std::vector<std::pair<std::string, std::vector<int64_t>>> ours;
  model.visit([&](const std::string& name, Param& p) {
    params[name] = &p;
    ours.emplace_back(name, std::vector<int64_t>(p.shape.begin(), p.shape.end()));
  });
  const std::vector<GgufTensorPlan> plan = gguf_tensor_plan(c, ours);
  for (const GgufTensorPlan& t : plan) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    result.parameters += n;
  }

  GgufWriter w;
  w.set("general.architecture", GgufValue::of_string(result.arch));
  w.set("general.type", GgufValue::of_string("model"));
  std::filesystem::path dir = std::filesystem::weakly_canonical(model_dir);
  w.set("general.name", GgufValue::of_string(dir.filename().string()));
  w.set("general.size_label", GgufValue::of_string(gguf_size_label(result.parameters)));
  if (c.family == ModelConfig::Family::Glm4) {
    glm4_hparams(c, w, type);
    yarn_keys(c, w, "glm4.");
  } else if (c.family == ModelConfig::Family::Glm4Moe) {
    glm4moe_hparams(c, w, type, result.notes);
    yarn_keys(c, w, "glm4moe.");
  } else if (c.family == ModelConfig::Family::Glm4MoeLite) {
    deepseek2_hparams(c, w, type, result.notes);
    yarn_keys(c, w, "deepseek2.");
  } else {
    GLM4_CHECK(!c.rope_scaling, "gguf export: rope_scaling (YaRN) is not exported for ",
               c.model_type,
               ": llama.cpp runs it as its chatglm architecture, whose converter writes no RoPE "
               "scaling");
    chatglm_hparams(c, w, type, result.notes);
  }
  set_u32(w, "general.quantization_version", kGgmlQuantVersion);

  const bool lite = c.family == ModelConfig::Family::Glm4MoeLite;
  const GgufVocabStyle style = c.family == ModelConfig::Family::Glm4 ? GgufVocabStyle::Glm4
                               : c.family == ModelConfig::Family::Glm4Moe || lite
                                   ? GgufVocabStyle::Glm4Moe
                                   : GgufVocabStyle::ChatGlm;
  const GgufVocab vocab = build_gguf_vocab(model_dir, style, c.vocab_size);
  add_vocab_metadata(vocab, w);
  // Without a token list llama.cpp takes the vocabulary size from here (it adds dummy tokens).
  if (vocab.model == "none" && !lite) set_u32(w, result.arch + ".vocab_size", c.vocab_size);
  result.notes.insert(result.notes.end(), vocab.notes.begin(), vocab.notes.end());

  for (const GgufTensorPlan& t : plan) {
    bool fell_back = false;
    const GgmlType tt = gguf_tensor_type(t.name, t.shape, type, &fell_back);
    if (fell_back) {
      result.notes.push_back(str_cat(t.name, ": rows of ", t.shape.back(),
                                     " values are not a multiple of ", ggml_block_size(type),
                                     ", so it is written f16 instead of ", ggml_type_name(type),
                                     " (as llama.cpp's converter does)"));
    }
    std::vector<int64_t> ne(t.shape.rbegin(), t.shape.rend());
    w.add_tensor(t.name, ne, tt, [&c, t, tt, &params] { return encode_sources(c, t, tt, params); });
  }
  result.tensors = int64_t(w.tensor_count());
  w.write(out);
  return result;
}

}  // namespace glm4
