// Encoding speed of the GLM-4 tokenizers (tiktoken ranks and tokenizer.json) on a megabyte of
// pseudo-English, against the bytes of text per second a training run needs.
// Usage: bench_tokenizer [--repeats N]
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/bench_flags.h"
#include "io/tokenizer/tokenizer.h"

namespace glm4 {
namespace {

std::string pseudo_english(size_t bytes) {
  const std::vector<std::string> common = {"the", "of",   "and", "to",    "in",
                                           "is",  "that", "for", "it",    "with",
                                           "as",  "was",  "on",  "model", "training"};
  const std::vector<std::string> syll = {"ka", "tor", "mi", "zen", "qua", "lin", "dro", "pex"};
  std::mt19937 rng(11);
  std::string text;
  while (text.size() < bytes) {
    if (rng() % 3 == 0) {
      for (int k = 1 + rng() % 4; k > 0; --k) text += syll[rng() % syll.size()];
    } else {
      text += common[rng() % common.size()];
    }
    text += rng() % 12 == 0 ? ", " : (rng() % 20 == 0 ? ".\n" : " ");
  }
  return text;
}

int run(int argc, char** argv) {
  int repeats = 3;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--repeats") repeats = std::stoi(bench::flag_value(argc, argv, i));
  }
  const std::string data = std::string(GLM4_SOURCE_DIR) + "/tests/data/tokenizers";
  const std::string text = pseudo_english(1u << 20);
  struct Case {
    const char* name;
    std::unique_ptr<Tokenizer> tok;
  };
  std::vector<Case> cases;
  cases.push_back({"glm4 tiktoken ranks", load_tokenizer(data + "/glm4-tiktoken")});
  cases.push_back(
      {"glm4 tokenizer.json", load_tokenizer_json(data + "/glm4-0414/tokenizer.derived.json")});
  std::printf("| tokenizer | bytes | tokens | best s | MB/s |\n|---|---|---|---|---|\n");
  for (const Case& c : cases) {
    double best = 1e30;
    size_t tokens = 0;
    for (int r = 0; r < repeats; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      tokens = c.tok->encode(text).size();
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("| %s | %zu | %zu | %.3f | %.1f |\n", c.name, text.size(), tokens, best,
                text.size() / best / 1e6);
  }
  return 0;
}

}  // namespace
}  // namespace glm4

int main(int argc, char** argv) { return glm4::run(argc, argv); }
