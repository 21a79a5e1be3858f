// Reproducible random initialisation with Hugging Face's scheme. Each tensor is cut into fixed
// chunks and each chunk draws from its own generator, seeded from (seed, tensor name, chunk), so
// the values do not depend on the thread count or on which other tensors exist.
#include <cmath>
#include <cstring>
#include <random>

#include "base/check.h"
#include "base/parallel.h"
#include "model/glm4_model.h"
#include "model/save.h"

namespace glm4 {

namespace {
constexpr int64_t kChunk = 1 << 16;  // even, so Box-Muller pairs never straddle two chunks

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Writes normal(0, std) values to put(i, value) for i in [0, n).
template <typename Put>
void fill_normal(uint64_t key, int64_t n, double std, Put&& put) {
  int64_t chunks = (n + kChunk - 1) / kChunk;
  parallel_for(chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      std::mt19937_64 rng(splitmix64(key ^ splitmix64(uint64_t(c))));
      int64_t lo = c * kChunk, hi = std::min(n, lo + kChunk);
      for (int64_t i = lo; i < hi; i += 2) {
        double u1 = double((rng() >> 11) + 1) * 0x1.0p-53;  // (0, 1]: log stays finite
        double u2 = double(rng() >> 11) * 0x1.0p-53;        // [0, 1)
        double r = std * std::sqrt(-2.0 * std::log(u1));
        double angle = 2.0 * M_PI * u2;
        put(i, float(r * std::cos(angle)));
        if (i + 1 < hi) put(i + 1, float(r * std::sin(angle)));
      }
    }
  });
}

Weight random_matrix(uint64_t key, int64_t rows, int64_t cols, double std, DType storage,
                     int64_t zero_row) {
  const int64_t n = rows * cols;
  std::vector<uint16_t> half;
  std::vector<float> full;
  if (storage == DType::F32)
    full.resize(size_t(n));
  else
    half.resize(size_t(n));
  fill_normal(key, n, std, [&](int64_t i, float v) {
    if (i / cols == zero_row) v = 0.0f;
    if (storage == DType::F32)
      full[size_t(i)] = v;
    else
      half[size_t(i)] = storage == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
  });
  return storage == DType::F32 ? Weight::copy_of(DType::F32, full.data(), rows, cols)
                               : Weight::copy_of(storage, half.data(), rows, cols);
}

double initializer_range(const ModelConfig& c) {
  if (!c.raw.is_object() || !c.raw.contains("initializer_range")) return 0.02;
  const auto& v = c.raw["initializer_range"];
  GLM4_CHECK(v.is_number() && v.get<double>() > 0 && std::isfinite(v.get<double>()),
             "config.json: initializer_range must be a positive number, got ", v.dump());
  return v.get<double>();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

Weight random_param(const ModelConfig& c, uint64_t seed, const std::string& name,
                    const Shape& shape, DType storage) {
  const double std = initializer_range(c);
  // nn.Embedding(vocab, hidden, padding_idx=pad_token_id) in Glm4Model/GlmModel; ChatGLM has none.
  int64_t pad_row = -1;
  if (c.family != ModelConfig::Family::ChatGlm && c.pad_token_id && *c.pad_token_id >= 0 &&
      *c.pad_token_id < c.vocab_size)
    pad_row = *c.pad_token_id;
  const uint64_t key = splitmix64(seed) ^ fnv1a(name);
  if (shape.size() == 2) {
    const int64_t zero_row = name == "model.embed_tokens.weight" ? pad_row : -1;
    return random_matrix(key, shape[0], shape[1], std, storage, zero_row);
  }
  // Biases and glm4_moe's e_score_correction_bias (a zero buffer in transformers) start at 0.
  const bool zero = ends_with(name, ".bias") || ends_with(name, ".e_score_correction_bias");
  std::vector<float> values(size_t(shape_numel(shape)), zero ? 0.0f : 1.0f);
  return Weight::from_f32(values.data(), 1, int64_t(values.size()));
}

void init_random(Glm4Model& model, uint64_t seed, DType storage) {
  model.visit([&](const std::string& name, Param& p) {
    p.assign(random_param(model.config, seed, name, p.shape, storage));
  });
}

}  // namespace glm4
