// One decode step's attention alone for a model of keys and values (GLM-4, ChatGLM, glm4_moe),
// at the config's shape: every layer's KV cache holds --context random tokens, and a step appends
// one token to each layer and attends over all of them, as a model's decode does (no model is
// made: configs/glm-4-9b-0414.json runs in the cache's memory). Each --kv-cache dtype in the same
// run, with the bytes of cache a step reads and their rate.
// Usage: bench_attention_decode [--config configs/glm-4-9b-0414.json] [--context 4096]
//                               [--kv-cache f32,bf16] [--layers N] [--reps 10] [--threads 2]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "base/parallel.h"
#include "benchmarks/bench_flags.h"
#include "infer/cached_forward.h"
#include "model/config.h"
#include "model/kv_cache.h"

using namespace glm4;

namespace {

struct Options {
  std::string config =
      (std::filesystem::path(__FILE__).parent_path().parent_path() / "configs/glm-4-9b-0414.json")
          .string();
  int64_t context = 4096;
  std::vector<std::string> kv_cache = {"f32", "bf16"};
  int64_t layers = 0;  // 0: the config's
  int reps = 10;
  int threads = 2;
};

Tensor random_tensor(const Shape& shape, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = normal(rng);
  return t;
}

// The best of `reps` steps, in seconds: every layer appends a token and attends over the cache.
double time_step(KvCache& cache, int64_t layers, int64_t Hq, int64_t Hkv, int64_t D, int reps) {
  std::mt19937 rng(2);
  const Tensor q = random_tensor({1, 1, Hq, D}, rng);
  const Tensor k = random_tensor({1, Hkv, D}, rng), v = random_tensor({1, Hkv, D}, rng);
  double best = 1e30;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    cache.begin(1);  // drops the last rep's token
    for (int64_t l = 0; l < layers; ++l) {
      const auto [keys, values] = cache.append(l, k, v);
      AttentionMask mask;
      mask.q_offset = keys.tokens - 1;
      const Tensor out =
          keys.bf16 ? ops::attention_bf16_kv(q, keys.bf16, values.bf16, keys.tokens, Hkv, mask, {})
                    : ops::attention(q, keys.f32, values.f32, mask, {});
    }
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
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
    else if (a == "--context")
      o.context = std::stoll(value());
    else if (a == "--kv-cache")
      o.kv_cache = bench::split_commas(value());
    else if (a == "--layers")
      o.layers = std::stoll(value());
    else if (a == "--reps")
      o.reps = std::stoi(value());
    else if (a == "--threads")
      o.threads = std::stoi(value());
    else {
      std::fprintf(stderr, "unknown flag %s (see the header of bench_attention_decode.cpp)\n",
                   a.c_str());
      return 2;
    }
  }
  set_max_threads(o.threads);
  const ModelConfig c = load_model_config(o.config);
  if (has_latent_attention(c)) {
    std::fprintf(stderr, "%s: latent attention; bench_mla_decode --attention-only times it\n",
                 o.config.c_str());
    return 2;
  }
  const int64_t layers = o.layers > 0 ? o.layers : c.num_hidden_layers;
  const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads, D = c.head_dim;
  std::printf(
      "# decode attention alone: %s, %ld of %ld layers, %ld heads on %ld kv heads of %ld, "
      "%ld cached tokens, %d threads, best of %d\n",
      o.config.c_str(), layers, c.num_hidden_layers, Hq, Hkv, D, o.context, o.threads, o.reps);
  NoGradGuard no_grad;
  for (const std::string& name : o.kv_cache) {
    DType dtype;
    if (!parse_kv_cache_name(name, &dtype)) {
      std::fprintf(stderr, "--kv-cache %s: expected f32 or bf16\n", name.c_str());
      return 2;
    }
    KvCache cache(layers, Hkv, D, 256, false, dtype);
    std::mt19937 rng(1);
    cache.begin(o.context);
    for (int64_t l = 0; l < layers; ++l)
      cache.append(l, random_tensor({o.context, Hkv, D}, rng),
                   random_tensor({o.context, Hkv, D}, rng));
    cache.commit();
    const double s = time_step(cache, layers, Hq, Hkv, D, o.reps);
    const double bytes =
        2.0 * double(layers * (o.context + 1) * Hkv * D) * double(dtype_size(dtype));
    std::printf("%-5s %8.2f ms a token  %7.1f MB of cache read  %6.1f GB/s\n", name.c_str(),
                1e3 * s, bytes / 1e6, bytes / s / 1e9);
  }
  return 0;
}
