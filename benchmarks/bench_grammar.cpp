// Constrained decoding cost (issue 32) on a random model of configs/mid.json: decode tokens/s
// with a 20-property JSON schema against unconstrained in the same run (greedy and temperature
// 1, alternating runs), the schema's compile time, the vocabulary trie's build time, and the mask
// time per token (cold: a fresh constraint meeting each state the first time; warm: the same
// tokens again). The vocabulary is GLM-4's tokenizer cut to the model's 32000 ids, the last of them
// standing for the end of a reply.
// Usage: bench_grammar [--config configs/mid.json] [--tokenizer
// tests/data/tokenizers/glm4-tiktoken]
//                      [--dtype bf16] [--tokens 256] [--reps 3] [--threads 2]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "autograd/node.h"
#include "base/parallel.h"
#include "benchmarks/bench_flags.h"
#include "benchmarks/bench_model.h"
#include "infer/generator.h"
#include "infer/grammar/constraint.h"
#include "infer/grammar/json_schema.h"
#include "model/config.h"

using namespace glm4;
using Clock = std::chrono::steady_clock;

namespace {

const std::filesystem::path kRoot = GLM4_SOURCE_DIR;

struct Options {
  std::string config = (kRoot / "configs/mid.json").string();
  std::string tokenizer = (kRoot / "tests/data/tokenizers/glm4-tiktoken").string();
  std::string dtype = "bf16";
  int tokens = 256;
  int reps = 3;
  int threads = 2;
};

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// 20 properties of every kind: bounded and unbounded strings, integers, numbers, booleans, enums,
// arrays, a nested object.
nlohmann::json schema_20() {
  nlohmann::json props = nlohmann::json::object(), required = nlohmann::json::array();
  for (int i = 0; i < 20; ++i) {
    nlohmann::json p;
    switch (i % 7) {
      case 0:
        p = {{"type", "string"}, {"maxLength", 16}};
        break;
      case 1:
        p = {{"type", "integer"}};
        break;
      case 2:
        p = {{"type", "number"}};
        break;
      case 3:
        p = {{"type", "boolean"}};
        break;
      case 4:
        p = {{"enum", {"alpha", "beta", "gamma", "delta"}}};
        break;
      case 5:
        p = {{"type", "array"}, {"items", {{"type", "string"}, {"maxLength", 8}}}, {"maxItems", 3}};
        break;
      default:
        p = {{"type", "object"},
             {"properties", {{"x", {{"type", "integer"}}}, {"y", {{"type", "string"}}}}},
             {"required", {"x", "y"}}};
    }
    const std::string name = "field_" + std::to_string(100 + i).substr(1);
    props[name] = p;
    required.push_back(name);
  }
  return {{"type", "object"},
          {"properties", props},
          {"required", required},
          {"additionalProperties", false}};
}

struct Run {
  double tokens_per_second = 0;
  std::vector<int32_t> ids;  // every token drawn, replies one after another
};

// Decodes `tokens` tokens (restarting when a constrained reply completes) and times next().
Run decode(const Glm4Model& model, const std::vector<int32_t>& prompt, float temperature,
           int tokens, const std::shared_ptr<const grammar::Grammar>& g,
           const std::shared_ptr<const grammar::TokenTrie>& trie, int32_t eos, uint64_t seed) {
  GenerationConfig gc;
  gc.max_tokens = tokens;
  gc.sampling.temperature = temperature;
  gc.sampling.seed = seed;
  gc.stop_ids = {eos};
  Generator gen(model, gc);
  if (g) gen.set_constraint(std::make_shared<grammar::GrammarConstraint>(g, trie, gc.stop_ids));
  Run run;
  double seconds = 0;
  int64_t steps = 0;
  while (int(run.ids.size()) < tokens) {
    gen.start(prompt);
    while (auto t = gen.next()) run.ids.push_back(*t);
    seconds += gen.stats().decode_seconds;
    steps += gen.stats().generated_tokens + (gen.stop_token() ? 1 : 0);
  }
  run.tokens_per_second = double(steps) / seconds;
  return run;
}

struct MaskTimes {
  double cold = 0, warm = 0;  // ms a token
  size_t states = 0;          // automaton states met
};

// Mask + advance per token over `ids` (replies one after another): a fresh constraint (cold),
// then the same tokens again (warm: every state's mask cached).
MaskTimes mask_times(const std::shared_ptr<const grammar::Grammar>& g,
                     const std::shared_ptr<const grammar::TokenTrie>& trie, int32_t eos,
                     const std::vector<int32_t>& ids) {
  grammar::GrammarConstraint c(g, trie, {eos});
  std::vector<float> logits(size_t(trie->vocab_size()), 0.0f);
  MaskTimes out;
  for (int pass = 0; pass < 2; ++pass) {
    c.reset();
    const auto t0 = Clock::now();
    for (int32_t id : ids) {
      std::fill(logits.begin(), logits.end(), 0.0f);
      c.mask(logits);
      if (!c.allows(id)) c.reset();  // the reply was complete: the next one starts here
      c.accept(id);
    }
    (pass == 0 ? out.cold : out.warm) = 1e3 * since(t0) / double(ids.size());
  }
  out.states = c.automaton().state_count();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return bench::flag_value(argc, argv, i); };
    if (a == "--config")
      o.config = value();
    else if (a == "--tokenizer")
      o.tokenizer = value();
    else if (a == "--dtype")
      o.dtype = value();
    else if (a == "--tokens")
      o.tokens = std::stoi(value());
    else if (a == "--reps")
      o.reps = std::stoi(value());
    else if (a == "--threads")
      o.threads = std::stoi(value());
    else {
      std::fprintf(stderr, "unknown flag %s (see the header of bench_grammar.cpp)\n", a.c_str());
      return 2;
    }
  }
  set_max_threads(o.threads);
  NoGradGuard no_grad;
  try {
    const ModelConfig config = load_model_config(o.config);
    auto tokenizer = load_tokenizer(o.tokenizer);
    std::vector<std::optional<std::string>> bytes(size_t(config.vocab_size));
    for (int32_t id = 0; id < config.vocab_size && id < tokenizer->vocab_size(); ++id)
      bytes[size_t(id)] = tokenizer->token_bytes(id);
    const int32_t eos = config.vocab_size - 1;  // the reply's end (ids 0 and 1 are "!" and '"')
    bytes[size_t(eos)] = std::nullopt;
    auto t0 = Clock::now();
    auto trie = std::make_shared<const grammar::TokenTrie>(bytes);
    const double trie_ms = 1e3 * since(t0);

    const nlohmann::json schema = schema_20();
    const int compiles = 50;
    t0 = Clock::now();
    for (int i = 0; i < compiles; ++i) {
      grammar::JsonSchemaGrammar g = grammar::compile_json_schema(schema, "schema");
      grammar::GrammarConstraint c(g.grammar, trie, {eos});
    }
    const double compile_ms = 1e3 * since(t0) / compiles;
    const auto g = grammar::compile_json_schema(schema, "schema").grammar;
    auto full_trie = std::make_shared<const grammar::TokenTrie>(*tokenizer);

    std::printf(
        "# bench_grammar: %s (%s, random weights), vocabulary %s cut to %lld ids (%zu trie "
        "nodes), %d tokens a run, best of %d alternating runs, %d threads\n",
        o.config.c_str(), o.dtype.c_str(), o.tokenizer.c_str(), (long long)config.vocab_size,
        trie->node_count(), o.tokens, o.reps, o.threads);
    std::printf(
        "schema of 20 properties: compile %.2f ms (grammar %zu symbols, %zu rules; with "
        "the automaton's start state), trie build %.1f ms\n",
        compile_ms, g->symbols.size(), g->starts.size(), trie_ms);

    auto owned = bench::make_model(config, o.dtype);
    std::mt19937_64 rng(1);
    std::vector<int32_t> prompt(32);
    for (int32_t& t : prompt) t = int32_t(2 + rng() % uint64_t(config.vocab_size - 2));

    std::printf(
        "# mask ms: mask + advance per token (cold: a fresh constraint, warm: the same tokens "
        "again); full vocab: the whole tokenizer (%d ids) on the same tokens\n",
        tokenizer->vocab_size());
    std::printf("%-13s %9s %10s %7s %9s %9s %7s %15s %9s\n", "sampling", "free t/s", "schema t/s",
                "ratio", "cold ms", "warm ms", "states", "full-vocab cold", "warm");
    for (float temperature : {0.0f, 1.0f}) {
      double best_free = 0, best_json = 0;
      Run json_run;
      for (int r = 0; r < o.reps; ++r) {
        best_free = std::max(best_free, decode(*owned, prompt, temperature, o.tokens, nullptr, trie,
                                               eos, uint64_t(r + 1))
                                            .tokens_per_second);
        Run run = decode(*owned, prompt, temperature, o.tokens, g, trie, eos, uint64_t(r + 1));
        if (run.tokens_per_second > best_json) best_json = run.tokens_per_second;
        if (r == 0) json_run = run;
      }
      const MaskTimes m = mask_times(g, trie, eos, json_run.ids);
      const MaskTimes full = mask_times(g, full_trie, eos, json_run.ids);
      std::printf("%-13s %9.1f %10.1f %6.0f%% %9.3f %9.3f %7zu %15.3f %9.3f\n",
                  temperature == 0 ? "greedy" : "temperature 1", best_free, best_json,
                  100 * best_json / best_free, m.cold, m.warm, m.states, full.cold, full.warm);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_grammar: %s\n", e.what());
    return 1;
  }
  return 0;
}
