// Reads config.json (glm4, glm, chatglm, glm4_moe, glm4_moe_lite) into ModelConfig, filling what a
// file leaves out with the defaults of the reference config classes, and reads the stop set from
// generation_config.json.
#include "model/config.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <sstream>

#include "base/check.h"
#include "io/file/json_file.h"
#include "model/config_detail.h"

namespace glm4 {
namespace fs = std::filesystem;
using json = nlohmann::json;
using Family = ModelConfig::Family;

const char* family_name(Family family) {
  switch (family) {
    case Family::Glm4:
      return "glm4";
    case Family::Glm:
      return "glm";
    case Family::ChatGlm:
      return "chatglm";
    case Family::Glm4Moe:
      return "glm4_moe";
    case Family::Glm4MoeLite:
      return "glm4_moe_lite";
  }
  return "?";
}

bool is_moe_family(const ModelConfig& c) {
  return c.family == Family::Glm4Moe || c.family == Family::Glm4MoeLite;
}

bool has_latent_attention(const ModelConfig& c) { return c.family == Family::Glm4MoeLite; }

bool is_moe_layer(const ModelConfig& c, int64_t layer) {
  return is_moe_family(c) && layer >= c.first_k_dense_replace;
}

bool ModelConfig::operator==(const ModelConfig& o) const {
  return family == o.family && model_type == o.model_type && vocab_size == o.vocab_size &&
         hidden_size == o.hidden_size && intermediate_size == o.intermediate_size &&
         num_hidden_layers == o.num_hidden_layers && num_attention_heads == o.num_attention_heads &&
         num_key_value_heads == o.num_key_value_heads && head_dim == o.head_dim &&
         rotary_dim == o.rotary_dim && rope_style == o.rope_style && rope_theta == o.rope_theta &&
         rope_scaling == o.rope_scaling && rms_norm_eps == o.rms_norm_eps &&
         attention_bias == o.attention_bias && tie_word_embeddings == o.tie_word_embeddings &&
         post_norms == o.post_norms && max_position_embeddings == o.max_position_embeddings &&
         eos_token_ids == o.eos_token_ids && pad_token_id == o.pad_token_id &&
         torch_dtype == o.torch_dtype && quantization == o.quantization &&
         use_qk_norm == o.use_qk_norm && n_routed_experts == o.n_routed_experts &&
         num_experts_per_tok == o.num_experts_per_tok &&
         moe_intermediate_size == o.moe_intermediate_size &&
         n_shared_experts == o.n_shared_experts && n_group == o.n_group &&
         topk_group == o.topk_group && norm_topk_prob == o.norm_topk_prob &&
         routed_scaling_factor == o.routed_scaling_factor &&
         first_k_dense_replace == o.first_k_dense_replace &&
         num_nextn_predict_layers == o.num_nextn_predict_layers && q_lora_rank == o.q_lora_rank &&
         kv_lora_rank == o.kv_lora_rank && qk_nope_head_dim == o.qk_nope_head_dim &&
         qk_rope_head_dim == o.qk_rope_head_dim && v_head_dim == o.v_head_dim;
}

namespace config_detail {

std::optional<Family> family_of(const json& j) {
  if (!j.is_object()) return std::nullopt;
  if (auto it = j.find("architectures"); it != j.end() && it->is_array()) {
    for (const json& a : *it) {
      if (!a.is_string()) continue;
      const std::string& s = a.get_ref<const std::string&>();
      if (s == "Glm4ForCausalLM") return Family::Glm4;
      if (s == "GlmForCausalLM") return Family::Glm;
      if (s == "ChatGLMModel" || s == "ChatGLMForConditionalGeneration") return Family::ChatGlm;
      if (s == "Glm4MoeForCausalLM") return Family::Glm4Moe;
      if (s == "Glm4MoeLiteForCausalLM") return Family::Glm4MoeLite;
    }
  }
  if (auto it = j.find("model_type"); it != j.end() && it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    if (s == "glm4") return Family::Glm4;
    if (s == "glm") return Family::Glm;
    if (s == "chatglm") return Family::ChatGlm;
    if (s == "glm4_moe") return Family::Glm4Moe;
    if (s == "glm4_moe_lite") return Family::Glm4MoeLite;
  }
  return std::nullopt;
}

}  // namespace config_detail

namespace {

constexpr const char* kSupported =
    "supported: model_type \"glm4\" (Glm4ForCausalLM), \"glm\" (GlmForCausalLM), \"chatglm\" "
    "(ChatGLMModel, ChatGLMForConditionalGeneration), \"glm4_moe\" (Glm4MoeForCausalLM), "
    "\"glm4_moe_lite\" (Glm4MoeLiteForCausalLM)";

std::string describe(const json& v) {
  if (v.is_null()) return "null";
  std::string s = v.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return str_cat(v.type_name(), " ", s);
}

// Typed access to the fields of one config object; every error names the source and the key.
class Fields {
 public:
  Fields(const json& j, const std::string& source) : j_(j), src_(source) {}

  const json* find(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  bool has(const char* key) const { return find(key) != nullptr; }
  bool has_value(const char* key) const {
    const json* v = find(key);
    return v != nullptr && !v->is_null();
  }

  [[noreturn]] void bad(const std::string& key, const char* want, const json& v) const {
    fail(src_, ": field \"", key, "\" must be ", want, ", got ", describe(v));
  }

  int64_t integer(const char* key) const {
    const json* v = find(key);
    if (v == nullptr) fail(src_, ": missing required field \"", key, "\"");
    return as_integer(key, *v);
  }
  int64_t integer(const char* key, int64_t fallback) const {
    const json* v = find(key);
    return v == nullptr ? fallback : as_integer(key, *v);
  }
  int64_t as_integer(const std::string& key, const json& v) const {
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      if (u > uint64_t(std::numeric_limits<int64_t>::max())) bad(key, "a 64-bit integer", v);
      return int64_t(u);
    }
    if (v.is_number_integer()) return v.get<int64_t>();
    bad(key, "an integer", v);
  }
  double number(const char* key, double fallback) const {
    const json* v = find(key);
    return v == nullptr ? fallback : as_number(key, *v);
  }
  double as_number(const std::string& key, const json& v) const {
    if (!v.is_number()) bad(key, "a number", v);
    double d = v.get<double>();
    if (!std::isfinite(d)) bad(key, "a finite number", v);
    return d;
  }
  bool boolean(const char* key, bool fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) bad(key, "true or false", *v);
    return v->get<bool>();
  }
  std::optional<std::string> string(const char* key) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) bad(key, "a string", *v);
    return v->get<std::string>();
  }
  int32_t token_id(const std::string& key, const json& v) const {
    int64_t id = as_integer(key, v);
    if (id < 0 || id > std::numeric_limits<int32_t>::max())
      fail(src_, ": field \"", key, "\" has token id ", id, " outside [0, 2^31)");
    return int32_t(id);
  }
  // An int or a list of ints (eos_token_id); nullopt when missing or null.
  std::optional<std::vector<int32_t>> token_ids(const char* key) const {
    const json* v = find(key);
    if (v == nullptr || v->is_null()) return std::nullopt;
    std::vector<int32_t> ids;
    if (v->is_array()) {
      for (const json& e : *v) {
        if (!e.is_number_integer()) bad(key, "an integer or a list of integers", *v);
        ids.push_back(token_id(key, e));
      }
    } else if (v->is_number_integer()) {
      ids.push_back(token_id(key, *v));
    } else {
      bad(key, "an integer or a list of integers", *v);
    }
    return ids;
  }
  const std::string& source() const { return src_; }

 private:
  const json& j_;
  const std::string& src_;
};

Family detect_family(const json& j, const std::string& src) {
  Fields f(j, src);
  if (const json* a = f.find("architectures"); a != nullptr && !a->is_null()) {
    if (!a->is_array()) f.bad("architectures", "a list of strings", *a);
  }
  std::optional<std::string> model_type = f.string("model_type");
  if (auto family = config_detail::family_of(j)) return *family;
  std::string arch =
      f.has("architectures") ? str_cat(", architectures ", describe(*f.find("architectures"))) : "";
  if (model_type)
    fail(src, ": unsupported model_type \"", *model_type, "\"", arch, " (", kSupported, ")");
  fail(src, ": no \"model_type\" or known \"architectures\" to tell the model family", arch, " (",
       kSupported, ")");
}

DType read_dtype(const Fields& f) {
  const char* key =
      f.has_value("torch_dtype") ? "torch_dtype" : "dtype";  // transformers 5 writes "dtype"
  if (!f.has_value(key)) return DType::F32;  // transformers' default when the file says nothing
  const std::string s = *f.string(key);
  if (s == "float32") return DType::F32;
  if (s == "bfloat16") return DType::BF16;
  if (s == "float16") return DType::F16;
  fail(f.source(), ": field \"", key, "\" is \"", s,
       "\"; supported: \"float32\", \"bfloat16\", \"float16\"");
}

// One rope_scaling / rope_parameters object of type "yarn"; `key` names it in errors. The
// factor is left 0 when the file has none (resolved against max_position_embeddings later).
RopeScaling read_yarn(const Fields& pf, const std::string& key) {
  RopeScaling y;
  y.factor = 0.0;
  auto number = [&](const char* name) -> std::optional<double> {
    if (!pf.has_value(name)) return std::nullopt;
    return pf.as_number(str_cat(key, ".", name), *pf.find(name));
  };
  if (auto v = number("factor")) {
    if (!(*v > 0.0)) fail(pf.source(), ": field \"", key, ".factor\" (", *v, ") must be positive");
    y.factor = *v;
  }
  if (pf.has_value("original_max_position_embeddings")) {
    const std::string name = str_cat(key, ".original_max_position_embeddings");
    const int64_t n = pf.as_integer(name, *pf.find("original_max_position_embeddings"));
    if (n <= 0) fail(pf.source(), ": field \"", name, "\" (", n, ") must be positive");
    y.original_max_position_embeddings = n;
  }
  y.beta_fast = number("beta_fast");
  y.beta_slow = number("beta_slow");
  y.mscale = number("mscale");
  y.mscale_all_dim = number("mscale_all_dim");
  y.attention_factor = number("attention_factor");
  if (y.attention_factor && !(*y.attention_factor > 0.0))
    fail(pf.source(), ": field \"", key, ".attention_factor\" (", *y.attention_factor,
         ") must be positive");
  if (pf.has_value("truncate")) {
    const json& t = *pf.find("truncate");
    if (!t.is_boolean()) pf.bad(str_cat(key, ".truncate"), "true or false", t);
    y.truncate = t.get<bool>();
  }
  return y;
}

// glm / glm4: RoPE settings may sit at the top level (transformers 4) or in `rope_parameters`
// (transformers 5); both places must agree. The default RoPE and YaRN are supported.
// `default_factor`: GlmConfig/Glm4Config/Glm4MoeConfig set 0.5; Glm4MoeLiteConfig none (1.0).
void read_glm_rope(const Fields& f, double default_factor, double* theta, double* factor,
                   std::optional<RopeScaling>* yarn) {
  bool has_theta = f.has("rope_theta"), has_factor = f.has("partial_rotary_factor");
  *theta = f.number("rope_theta", 10000.0);
  *factor = f.number("partial_rotary_factor", default_factor);
  const char* yarn_key = nullptr;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    const json* p = f.find(key);
    if (p == nullptr || p->is_null()) continue;
    if (!p->is_object()) f.bad(key, "an object", *p);
    Fields pf(*p, f.source());
    std::string type = "default";
    for (const char* tk : {"rope_type", "type"}) {
      if (pf.has_value(tk)) type = *pf.string(tk);
    }
    if (type != "default" && type != "yarn")
      fail(f.source(), ": field \"", key, "\" asks for RoPE type \"", type,
           "\"; supported: \"default\" and \"yarn\"");
    if (type == "yarn") {
      RopeScaling y = read_yarn(pf, key);
      if (*yarn && !(**yarn == y))
        fail(f.source(), ": fields \"", yarn_key, "\" and \"", key,
             "\" give different YaRN settings");
      *yarn = y;
      yarn_key = key;
    }
    auto merge = [&](const char* name, bool top_present, double* value) {
      if (!pf.has(name)) return;
      double v = pf.as_number(str_cat(key, ".", name), *pf.find(name));
      if (top_present && v != *value)
        fail(f.source(), ": field \"", name, "\" (", *value, ") disagrees with \"", key, ".", name,
             "\" (", v, ")");
      *value = v;
    };
    merge("rope_theta", has_theta, theta);
    merge("partial_rotary_factor", has_factor, factor);
  }
  if (*yarn && yarn->value().factor == 0.0 && !yarn->value().original_max_position_embeddings)
    fail(f.source(), ": field \"", yarn_key,
         "\" of RoPE type \"yarn\" needs \"factor\" (or \"original_max_position_embeddings\")");
}

// glm4_moe_lite's dense/sparse layer pattern: `mlp_layer_types` (transformers 5) must be dense
// layers then sparse ones, and agree with `first_k_dense_replace` when both are given.
int64_t read_dense_prefix(const Fields& f, int64_t layers) {
  const json* types = f.find("mlp_layer_types");
  if (types == nullptr || types->is_null()) return f.integer("first_k_dense_replace", 1);
  if (!types->is_array()) f.bad("mlp_layer_types", "a list of \"dense\" / \"sparse\"", *types);
  if (int64_t(types->size()) != layers)
    fail(f.source(), ": field \"mlp_layer_types\" has ", types->size(),
         " entries for \"num_hidden_layers\" ", layers);
  int64_t dense = 0;
  for (size_t i = 0; i < types->size(); ++i) {
    const json& t = (*types)[i];
    if (t != "dense" && t != "sparse")
      f.bad(str_cat("mlp_layer_types[", i, "]"), "\"dense\" or \"sparse\"", t);
    if (t == "dense" && dense != int64_t(i))
      fail(f.source(), ": field \"mlp_layer_types\": dense layer ", i,
           " after a sparse one; only dense layers then sparse ones are supported");
    if (t == "dense") ++dense;
  }
  if (f.has_value("first_k_dense_replace") && f.integer("first_k_dense_replace") != dense)
    fail(f.source(), ": field \"first_k_dense_replace\" (", f.integer("first_k_dense_replace"),
         ") disagrees with the ", dense, " dense layers of \"mlp_layer_types\"");
  return dense;
}

// glm4_moe_lite: latent attention sizes, RoPE on the qk_rope_head_dim tail of each q/k head
// (interleaved pairs unless rope_interleave is false), with Glm4MoeLiteConfig's defaults.
void read_latent_fields(const Fields& f, ModelConfig& c, double rotary_factor) {
  c.q_lora_rank = f.has_value("q_lora_rank") ? f.integer("q_lora_rank") : 0;
  if (f.has_value("q_lora_rank") && c.q_lora_rank <= 0)
    fail(f.source(), ": field \"q_lora_rank\" (", c.q_lora_rank, ") must be positive or null");
  c.kv_lora_rank = f.integer("kv_lora_rank", 512);
  c.qk_nope_head_dim = f.integer("qk_nope_head_dim", 192);
  c.qk_rope_head_dim = f.integer("qk_rope_head_dim", 64);
  c.v_head_dim = f.integer("v_head_dim", 256);
  c.head_dim = c.qk_nope_head_dim + c.qk_rope_head_dim;
  // transformers reads head_dim as qk_rope_head_dim and rotates int(it * partial_rotary_factor)
  // dims; anything but the whole rotary part leaves cos/sin the wrong width there.
  const int64_t rd = int64_t(double(c.qk_rope_head_dim) * rotary_factor);
  if (rd != c.qk_rope_head_dim)
    fail(f.source(), ": field \"partial_rotary_factor\" (", rotary_factor,
         ") must be 1: glm4_moe_lite rotates all \"qk_rope_head_dim\" (", c.qk_rope_head_dim,
         ") dims");
  c.rotary_dim = c.qk_rope_head_dim;
  c.rope_style =
      f.boolean("rope_interleave", true) ? RopeStyle::Interleaved : RopeStyle::RotateHalf;
  c.num_key_value_heads = f.integer("num_key_value_heads", c.num_attention_heads);
  c.first_k_dense_replace = read_dense_prefix(f, c.num_hidden_layers);
}

// glm4_moe (and glm4_moe_lite): rotate-half RoPE, q/k norm and the Mixture-of-Experts fields,
// with the defaults of transformers' Glm4MoeConfig.
void read_moe_fields(const Fields& f, ModelConfig& c) {
  c.rope_style = RopeStyle::RotateHalf;
  if (c.family == Family::Glm4MoeLite) {
    if (f.boolean("use_qk_norm", false))
      fail(f.source(), ": field \"use_qk_norm\" is true; glm4_moe_lite has no q/k norm");
  } else {
    c.use_qk_norm = f.boolean("use_qk_norm", false);
  }
  c.n_routed_experts = f.integer("n_routed_experts");
  c.num_experts_per_tok = f.integer("num_experts_per_tok");
  c.moe_intermediate_size = f.integer("moe_intermediate_size");
  c.n_shared_experts = f.integer("n_shared_experts", 1);
  // null means 1, as the reference reads `n_group or 1`
  c.n_group = f.has_value("n_group") ? f.integer("n_group") : 1;
  c.topk_group = f.has_value("topk_group") ? f.integer("topk_group") : 1;
  c.norm_topk_prob = f.boolean("norm_topk_prob", true);
  c.routed_scaling_factor = f.number("routed_scaling_factor", 1.0);
  c.first_k_dense_replace = f.integer("first_k_dense_replace", 1);
  c.num_nextn_predict_layers = f.integer("num_nextn_predict_layers", 0);
  for (const char* key : {"scoring_func", "topk_method"}) {
    const char* want = std::string(key) == "scoring_func" ? "sigmoid" : "noaux_tc";
    if (auto v = f.string(key); v && *v != want)
      fail(f.source(), ": field \"", key, "\" is \"", *v, "\"; ", family_name(c.family),
           " routes with \"", want, "\"");
  }
}

ModelConfig parse_glm(const json& j, const std::string& src, Family family) {
  Fields f(j, src);
  ModelConfig c;
  c.family = family;
  c.model_type = family_name(family);
  c.vocab_size = f.integer("vocab_size");
  c.hidden_size = f.integer("hidden_size");
  c.intermediate_size = f.integer("intermediate_size");
  c.num_hidden_layers = f.integer("num_hidden_layers");
  c.num_attention_heads = f.integer("num_attention_heads");
  const bool lite = family == Family::Glm4MoeLite;
  const bool moe = family == Family::Glm4Moe || lite;
  c.num_key_value_heads =
      f.integer("num_key_value_heads", moe ? 8 : 2);  // the class default, not the head count
  if (!moe) {
    c.head_dim = f.integer("head_dim", 128);  // the class default, not hidden_size / heads
  } else if (f.has_value("head_dim")) {
    c.head_dim = f.integer("head_dim");
  } else {  // Glm4MoeAttention: getattr(config, "head_dim", hidden_size // num_attention_heads)
    c.head_dim = c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0;
  }
  if (auto act = f.string("hidden_act"); act && *act != "silu")
    fail(src, ": field \"hidden_act\" is \"", *act, "\"; only \"silu\" is supported");

  double factor;
  read_glm_rope(f, lite ? 1.0 : 0.5, &c.rope_theta, &factor, &c.rope_scaling);
  if (!(factor > 0.0 && factor <= 1.0))
    fail(src, ": field \"partial_rotary_factor\" (", factor, ") must be in (0, 1]");
  // Python's int(head_dim * partial_rotary_factor): truncation, applied once.
  // (sizes past int32 are rejected by validation; 0 stands in until then)
  const bool sane = c.head_dim > 0 && c.head_dim <= std::numeric_limits<int32_t>::max();
  c.rotary_dim = sane ? int64_t(double(c.head_dim) * factor) : 0;

  c.rms_norm_eps = f.number("rms_norm_eps", moe ? 1e-5 : 1.5625e-07);
  c.attention_bias = f.boolean("attention_bias", !moe);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  c.post_norms = family == Family::Glm4;
  c.max_position_embeddings = f.integer("max_position_embeddings", 131072);
  if (c.rope_scaling && c.rope_scaling->factor == 0.0)  // transformers 5: the context ratio
    c.rope_scaling->factor = double(c.max_position_embeddings) /
                             double(*c.rope_scaling->original_max_position_embeddings);
  // Glm4MoeConfig sets no eos or pad id (PretrainedConfig's None); the published checkpoints do.
  const std::vector<int32_t> no_ids;
  c.eos_token_ids =
      f.token_ids("eos_token_id").value_or(moe ? no_ids : config_detail::kGlmDefaultEos);
  if (!f.has("pad_token_id")) {
    if (!moe) c.pad_token_id = config_detail::kGlmDefaultPad;
  } else if (!f.find("pad_token_id")->is_null()) {
    c.pad_token_id = f.token_id("pad_token_id", *f.find("pad_token_id"));
  }
  c.torch_dtype = read_dtype(f);
  if (moe) read_moe_fields(f, c);
  if (lite) read_latent_fields(f, c, factor);
  return c;
}

void require_flag(const Fields& f, const char* key, bool fallback, bool wanted, const char* why) {
  if (f.boolean(key, fallback) != wanted)
    fail(f.source(), ": field \"", key, "\" is ", wanted ? "false" : "true", ": ", why);
}

ModelConfig parse_chatglm(const json& j, const std::string& src) {
  Fields f(j, src);
  if (f.has("position_encoding_2d") || (f.has("inner_hidden_size") && !f.has("ffn_hidden_size")))
    fail(src,
         ": this is a first-generation ChatGLM-6B config (\"position_encoding_2d\" / "
         "\"inner_hidden_size\"); only ChatGLM2/3 and glm-4-9b-chat are supported");
  ModelConfig c;
  c.family = Family::ChatGlm;
  c.model_type = family_name(c.family);
  if (f.has("num_layers")) {
    c.num_hidden_layers = f.integer("num_layers");
    if (f.has("num_hidden_layers") && f.integer("num_hidden_layers") != c.num_hidden_layers)
      fail(src, ": field \"num_layers\" (", c.num_hidden_layers,
           ") disagrees with \"num_hidden_layers\" (", f.integer("num_hidden_layers"), ")");
  } else if (f.has("num_hidden_layers")) {
    c.num_hidden_layers = f.integer("num_hidden_layers");
  } else {
    f.integer("num_layers");  // reports the missing field
  }
  c.vocab_size = f.integer("padded_vocab_size");
  c.hidden_size = f.integer("hidden_size");
  c.intermediate_size = f.integer("ffn_hidden_size");
  c.num_attention_heads = f.integer("num_attention_heads");
  if (f.has("kv_channels") && f.find("kv_channels")->is_null()) {
    // modeling_chatglm.py: kv_channels None means hidden_size // num_attention_heads.
    if (c.num_attention_heads <= 0 || c.hidden_size % c.num_attention_heads != 0)
      fail(src, ": field \"hidden_size\" (", c.hidden_size,
           ") must be divisible by \"num_attention_heads\" (", c.num_attention_heads,
           ") when \"kv_channels\" is null");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  } else {
    c.head_dim = f.integer("kv_channels", 128);
  }
  bool mqa = f.boolean("multi_query_attention", false);
  int64_t groups = f.integer("multi_query_group_num", 1);
  c.num_key_value_heads = mqa ? groups : c.num_attention_heads;

  require_flag(f, "rmsnorm", true, true, "only RMSNorm ChatGLM models are supported");
  require_flag(f, "add_bias_linear", false, false,
               "biases on the dense and MLP projections are not supported");
  require_flag(f, "apply_residual_connection_post_layernorm", false, false,
               "residuals taken after the layer norm are not supported");
  require_flag(f, "post_layer_norm", true, true,
               "models without a final layer norm are not supported");
  if (f.has("original_rope"))
    require_flag(f, "original_rope", true, true,
                 "only the original (interleaved) RoPE is supported");
  c.attention_bias = f.boolean("add_qkv_bias", false);
  c.rms_norm_eps = f.number("layernorm_epsilon", 1e-5);
  double ratio = f.number("rope_ratio", 1.0);
  if (!(ratio > 0.0)) fail(src, ": field \"rope_ratio\" (", ratio, ") must be positive");
  c.rope_theta = config_detail::kChatGlmRopeBase * ratio;
  c.rotary_dim = c.head_dim / 2;  // RotaryEmbedding(kv_channels // 2)
  c.post_norms = false;
  // The remote code keeps a separate transformer.output_layer and never ties it; the value in
  // the file (always false in THUDM's checkpoints) is only type-checked.
  f.boolean("tie_word_embeddings", false);
  c.tie_word_embeddings = false;
  c.max_position_embeddings = f.integer("seq_length", 2048);
  c.eos_token_ids = f.token_ids("eos_token_id").value_or(std::vector<int32_t>{});
  if (f.has_value("pad_token_id"))
    c.pad_token_id = f.token_id("pad_token_id", *f.find("pad_token_id"));
  c.torch_dtype = read_dtype(f);
  return c;
}

// mlx's "quantization" object, else an mlx-style "quantization_config" (mlx-lm writes both);
// a null value means none.
std::optional<QuantConfig> read_quantization(const json& j, const std::string& src, Family family) {
  const char* field = nullptr;
  for (const char* key : {"quantization", "quantization_config"}) {
    auto it = j.find(key);
    if (it != j.end() && !it->is_null()) {
      field = key;
      break;
    }
  }
  if (field == nullptr) return std::nullopt;
  if (family == Family::ChatGlm)
    fail(src, ": field \"", field,
         "\": quantized chatglm checkpoints are not supported (glm4 and glm are)");
  return parse_quant_config(j.at(field), src, field);
}

}  // namespace

ModelConfig parse_model_config(const json& j, const std::string& source) {
  if (!j.is_object()) fail(source, ": expected a JSON object at the top level, got ", describe(j));
  Family family = detect_family(j, source);
  ModelConfig c =
      family == Family::ChatGlm ? parse_chatglm(j, source) : parse_glm(j, source, family);
  c.quantization = read_quantization(j, source, family);
  c.raw = j;
  validate_model_config(c, source);
  return c;
}

ModelConfig load_model_config(const fs::path& model_dir_or_config_json) {
  fs::path file = model_dir_or_config_json;
  std::error_code ec;
  if (fs::is_directory(file, ec)) file /= "config.json";
  return parse_model_config(read_json_file(file), file.string());
}

std::vector<int32_t> load_eos_ids(const fs::path& model_dir) {
  ModelConfig c = load_model_config(model_dir);
  fs::path gen_path = model_dir / "generation_config.json";
  std::error_code ec;
  if (!fs::exists(gen_path, ec)) return c.eos_token_ids;
  json gen = read_json_file(gen_path);
  const std::string src = gen_path.string();
  if (!gen.is_object()) fail(src, ": expected a JSON object at the top level, got ", describe(gen));
  auto ids = Fields(gen, src).token_ids("eos_token_id");
  if (!ids) return c.eos_token_ids;
  for (int32_t id : *ids) {
    if (id >= c.vocab_size)
      fail(src, ": field \"eos_token_id\" has token id ", id, " outside the vocabulary [0, ",
           c.vocab_size, ")");
  }
  return *ids;
}

}  // namespace glm4
