// Shared fixtures for the tokenizer and chat-template tests: the real tokenizer files in
// tests/data/tokenizers (missing files fail the test, never skip it) and a tokenizer trained
// once per process on a tiny corpus.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/check.h"
#include "io/tokenizer/sp_trainer.h"
#include "io/tokenizer/tokenizer.h"

namespace glm4::testing {

inline std::filesystem::path tokenizer_data() {
  return std::filesystem::path(GLM4_TEST_DATA) / "tokenizers";
}

inline std::filesystem::path require_file(const std::filesystem::path& p) {
  GLM4_CHECK(std::filesystem::exists(p), "test data missing: ", p.string());
  return p;
}

inline std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path) {
  std::ifstream in(require_file(path));
  std::vector<nlohmann::json> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  }
  GLM4_CHECK(!rows.empty(), "no rows in ", path.string());
  return rows;
}

inline std::vector<int32_t> ids_of(const nlohmann::json& j) {
  return j.get<std::vector<int32_t>>();
}

// A scratch directory removed at process exit.
inline std::filesystem::path scratch_dir(const std::string& name) {
  static const std::filesystem::path root = [] {
    auto p =
        std::filesystem::temp_directory_path() / ("glm4_tok_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(p);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(
          std::filesystem::temp_directory_path() / ("glm4_tok_test_" + std::to_string(::getpid())),
          ec);
    });
    return p;
  }();
  auto p = root / name;
  std::filesystem::create_directories(p);
  return p;
}

// A small deterministic corpus: English-like sentences with some Chinese, digits and punctuation.
inline std::string tiny_corpus() {
  const char* words[] = {"the",      "model", "learns", "to",      "answer", "questions",
                         "about",    "small", "cats",   "and",     "dogs",   "while",
                         "training", "on",    "data",   "quickly", "tokens", "are",
                         "merged",   "into",  "pieces", "你好",    "世界",   "模型"};
  std::string out;
  uint32_t state = 12345;
  for (int line = 0; line < 300; ++line) {
    const int n = 4 + line % 9;
    for (int w = 0; w < n; ++w) {
      state = state * 1664525u + 1013904223u;
      out += words[(state >> 8) % std::size(words)];
      out += w + 1 < n ? " " : (line % 3 == 0 ? ". " + std::to_string(line * 7) : ".");
    }
    out += '\n';
  }
  return out;
}

// Trains (once per process) a sentencepiece tokenizer on tiny_corpus().
inline std::filesystem::path trained_sp_dir() {
  static const std::filesystem::path dir = [] {
    const auto corpus = scratch_dir("corpus") / "corpus.txt";
    std::ofstream(corpus) << tiny_corpus();
    const auto out = scratch_dir("trained_sp");
    train_sentencepiece({corpus}, 320, out);
    return out;
  }();
  return dir;
}

// The real tokenizers, loaded once: "glm4-tiktoken", "glm4-json" (the derived tokenizer.json),
// "chatglm2", "chatglm3", "trained-sp".
inline const Tokenizer& shared_tokenizer(const std::string& which) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[which];
  if (!slot) {
    const auto d = tokenizer_data();
    if (which == "glm4-tiktoken") {
      require_file(d / "glm4-tiktoken" / "tokenizer.model");
      slot = load_tokenizer(d / "glm4-tiktoken");
    } else if (which == "glm4-json") {
      slot = load_tokenizer_json(require_file(d / "glm4-0414" / "tokenizer.derived.json"));
    } else if (which == "chatglm2" || which == "chatglm3") {
      require_file(d / which / "tokenizer.model");
      slot = load_tokenizer(d / which);
    } else if (which == "trained-sp") {
      slot = load_tokenizer(trained_sp_dir());
    } else {
      fail("unknown test tokenizer ", which);
    }
  }
  return *slot;
}

}  // namespace glm4::testing
