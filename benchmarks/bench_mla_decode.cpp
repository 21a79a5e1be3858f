// glm4_moe_lite decode at a long context: the latent-space form (the cache's latents and shared
// rotary keys read directly, kv_b_proj folded into the query and applied after the weighted sum)
// against the expanded form (per-head keys and values rebuilt from the cached latents each step,
// what an unmerged kv_b_proj adapter makes the model do), on a random model of
// configs/moe-lite-mid.json whose cache is filled with --context random tokens. With
// --attention-only, one layer's latent attention alone at the config's shape (no model is made:
// configs/glm-4.7-flash.json runs in a few MB), kv_b_proj stored as --dtype. --kv-cache bf16 holds
// the latent cache in bf16 (glm4 generate's --kv-cache).
// Usage: bench_mla_decode [--config configs/moe-lite-mid.json] [--dtype bf16] [--context 4096]
//                         [--tokens 8] [--threads 2] [--compute auto] [--attention-only]
//                         [--kv-cache f32|bf16]
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "autograd/kernels/quant_linear.h"
#include "base/parallel.h"
#include "benchmarks/bench_flags.h"
#include "benchmarks/bench_model.h"
#include "infer/cached_forward.h"
#include "model/compute_choice.h"
#include "model/lora.h"
#include "model/mla_latent_decode.h"

using namespace glm4;

namespace {

struct Options {
  std::string config =
      (std::filesystem::path(__FILE__).parent_path().parent_path() / "configs/moe-lite-mid.json")
          .string();
  std::string dtype = "bf16";
  int64_t context = 4096;
  int tokens = 8;
  int threads = 2;
  std::string compute = "auto";
  bool attention_only = false;
  DType kv_cache = DType::F32;
};

// A cache holding `context` tokens of random latents and rotary keys in every layer.
KvCache filled_cache(const Glm4Model& model, int64_t context, DType dtype) {
  KvCache cache = make_cache(model, dtype);
  const ModelConfig& c = model.config;
  const int64_t W = cache_values_per_token_layer(c);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  cache.begin(context);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    Tensor t = Tensor::empty({context, 1, W});
    for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = normal(rng);
    cache.append_keys(l, t);
  }
  cache.commit();
  return cache;
}

// Seconds a decode step takes, best of `tokens` steps after the cache's `context` tokens.
double decode_seconds(const Glm4Model& model, int64_t context, int tokens, DType dtype) {
  KvCache cache = filled_cache(model, context, dtype);
  double best = 1e30;
  for (int i = 0; i < tokens; ++i) {
    const int32_t id = 7 + i;
    CachedRow row{&cache, std::span<const int32_t>(&id, 1), context + i};
    const auto t0 = std::chrono::steady_clock::now();
    cached_forward(model, {&row, 1}, true);
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// Milliseconds one layer's latent attention takes for one query after `context` cached tokens,
// best of `tokens` calls; kv_b_proj random in `form` (f32, bf16, q4, q8), "auto" / "bf16" compute
// on the CPU's bf16 kernel when it has one.
double attention_ms(const ModelConfig& c, const Options& o) {
  const LatentShape s{c.num_attention_heads, c.kv_lora_rank, c.qk_nope_head_dim, c.qk_rope_head_dim,
                      c.v_head_dim};
  Param kv_b;
  kv_b.shape = {s.heads * (s.nope_dim + s.v_dim), s.kv_lora_rank};
  const std::string name = "model.layers.1.self_attn.kv_b_proj.weight";
  if (o.dtype == "q4" || o.dtype == "q8")
    kv_b.frozen = quantize_weight(random_param(c, 0, name, kv_b.shape, DType::BF16),
                                  {o.dtype == "q4" ? 4 : 8, 64}, DType::BF16, name);
  else
    kv_b.frozen = random_param(c, 0, name, kv_b.shape, o.dtype == "f32" ? DType::F32 : DType::BF16);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Tensor q = Tensor::empty({1, 1, s.heads, s.nope_dim + s.rope_dim});
  const int64_t W = cache_values_per_token_layer(c);
  Tensor values = Tensor::empty({o.context + 1, 1, W});
  for (Tensor* t : {&q, &values})
    for (int64_t i = 0; i < t->numel(); ++i) t->data()[i] = normal(rng);
  KvCache cache(1, 1, W, 256, true, o.kv_cache);
  cache.begin(o.context + 1);
  const CachedTokens cached = cache.append_keys(0, values);
  // As apply_compute_flag resolves it for a model of such weights: bf16 on bf16 units, and for
  // quantized ones also on the int8 kernels of a CPU without them.
  const bool quantized = o.dtype == "q4" || o.dtype == "q8";
  const bool bf16 = o.compute != "f32" && (kernels::bf16_kernel() != kernels::Bf16Kernel::kNone ||
                                           (quantized && quant_int8_available()));
  const ComputeChoice compute = bf16 ? bf16_compute(kernels::bf16_kernel()) : kF32Compute;
  std::printf("# latent attention alone: %s, kv_b_proj %s, compute %s, %ld cached tokens in %s\n",
              o.config.c_str(), o.dtype.c_str(), compute.describe().c_str(), long(o.context),
              dtype_name(o.kv_cache));
  double best = 1e30;
  for (int i = 0; i < o.tokens; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    latent_attention(q, cached, kv_b, s, compute);
    best = std::min(
        best,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return bench::flag_value(argc, argv, i); };
    if (a == "--config")
      o.config = value();
    else if (a == "--dtype")
      o.dtype = value();
    else if (a == "--context")
      o.context = std::stoll(value());
    else if (a == "--tokens")
      o.tokens = std::stoi(value());
    else if (a == "--threads")
      o.threads = std::stoi(value());
    else if (a == "--compute")
      o.compute = value();
    else if (a == "--attention-only")
      o.attention_only = true;
    else if (a == "--kv-cache") {
      const std::string v = value();
      GLM4_CHECK(parse_kv_cache_name(v, &o.kv_cache), "--kv-cache: f32 or bf16, got ", v);
    } else {
      std::fprintf(stderr, "unknown flag %s (see the header of bench_mla_decode.cpp)\n", a.c_str());
      return 2;
    }
  }
  set_max_threads(o.threads);
  const ModelConfig c = load_model_config(o.config);
  GLM4_CHECK(has_latent_attention(c), o.config, ": not a glm4_moe_lite config");
  if (o.attention_only) {
    const double ms = attention_ms(c, o);
    std::printf("attention %.3f ms a layer, %.1f ms a token over %ld layers\n", ms,
                ms * double(c.num_hidden_layers), long(c.num_hidden_layers));
    return 0;
  }
  auto model = bench::make_model(c, o.dtype);
  const ComputeChoice compute = apply_compute_flag(*model, o.compute);
  const int64_t L = c.num_hidden_layers, H = c.num_attention_heads, S = o.context;
  const double cache_mb =
      double(L * S * cache_values_per_token_layer(c) * int64_t(dtype_size(o.kv_cache))) / 1e6;
  const double expanded_mb =
      double(L * S * H * (c.qk_nope_head_dim + c.qk_rope_head_dim + c.v_head_dim)) * 4 / 1e6;
  std::printf(
      "# bench_mla_decode: %s, %s weights, --compute %s (%s), %ld cached tokens, %d threads, "
      "best of %d\n",
      o.config.c_str(), o.dtype.c_str(), o.compute.c_str(), compute.describe().c_str(), long(S),
      o.threads, o.tokens);
  std::printf(
      "# attention state a step reads: latent cache %.1f MB (%s); expanded keys and values "
      "%.1f MB (rebuilt from that cache each step)\n",
      cache_mb, dtype_name(o.kv_cache), expanded_mb);
  const double latent = decode_seconds(*model, S, o.tokens, o.kv_cache);
  std::printf("latent   %8.2f tok/s  (%.1f ms a token)\n", 1.0 / latent, 1e3 * latent);
  LoraConfig lora;
  lora.targets = {"kv_b_proj"};
  model->add_lora(lora, 1);  // B = 0: the same numbers, through the expanded form
  const double expanded = decode_seconds(*model, S, o.tokens, o.kv_cache);
  std::printf("expanded %8.2f tok/s  (%.1f ms a token); latent is %.1fx faster\n", 1.0 / expanded,
              1e3 * expanded, expanded / latent);
  return 0;
}
