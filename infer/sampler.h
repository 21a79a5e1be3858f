// Picks the next token from a row of logits: repetition penalty, temperature, top-k, top-p,
// min-p, then a draw from a seeded generator; temperature 0 is greedy (argmax).
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace glm4 {

struct SamplerConfig {
  float temperature = 0;     // 0 = greedy
  int top_k = 0;             // keep the k most likely tokens; 0 = all
  float top_p = 1;           // keep the smallest prefix of sorted probabilities reaching p
  float min_p = 0;           // drop tokens whose probability is below min_p * the largest
  float repeat_penalty = 1;  // > 1 discourages tokens of the last repeat_last_n of the history
  int repeat_last_n = 64;    // 0 = no penalty, -1 = the whole history
  uint64_t seed = 0;
};

// Sets the logits of ids from `drawable` on to -inf, so no sampler draws them (ids the tokenizer
// cannot decode); nothing when drawable is 0 or covers the row.
void mask_undrawable(std::span<float> logits, int64_t drawable);

class Sampler {
 public:
  explicit Sampler(SamplerConfig config);

  // `logits` [vocab] are not modified; `history` is every token of the context so far, oldest
  // first (only its tail is read). Throws glm4::Error on an empty or all-(-inf)/NaN row or a
  // history id outside the vocabulary.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);

  const SamplerConfig& config() const { return config_; }

 private:
  struct Candidate {
    int32_t id;
    float logit;
    double prob;
  };
  double uniform();  // [0, 1) from 53 bits: the same sequence on every platform

  SamplerConfig config_;
  std::mt19937_64 rng_;
  std::vector<float> scratch_;         // [vocab] penalised logits
  std::vector<Candidate> candidates_;  // survivors of the filters, most likely first
};

}  // namespace glm4
