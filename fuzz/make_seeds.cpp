// fuzz_make_seeds OUT: writes small valid inputs for the binary formats, made by glm4's own
// writers (so they match what the targets expect), into OUT/<target>/. scripts/fuzz.sh adds
// the text seeds from tests/data and fuzz/seeds beside them.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "export/gguf_writer.h"
#include "fuzz/fuzz_fixtures.h"
#include "io/model_files.h"
#include "io/safetensors.h"
#include "io/tokenizer/sp_trainer.h"
#include "train/training_state.h"

namespace fs = std::filesystem;
using namespace glm4;

namespace {

void copy_into(const fs::path& from, const fs::path& dir, const std::string& name) {
  fs::create_directories(dir);
  fs::copy_file(from, dir / name, fs::copy_options::overwrite_existing);
}

void safetensors_seeds(const fs::path& out, const fs::path& tmp) {
  const std::vector<float> v(12, 0.5f);
  const std::vector<uint16_t> h(4, 0x3f80);
  write_safetensors(
      tmp / "a.safetensors",
      {f32_tensor("w", {3, 4}, v.data()), TensorToWrite{"h", "BF16", {4}, h.data(), h.size() * 2}},
      {{"format", "pt"}});
  copy_into(tmp / "a.safetensors", out / "fuzz_safetensors", "two_tensors");
  fuzz::write_shard_fixture(tmp);
  // The index of the shard fixture, as write_model_files writes one.
  nlohmann::json index = {{"metadata", {{"total_size", 60}}},
                          {"weight_map",
                           {{"a", "model-00001-of-00002.safetensors"},
                            {"b", "model-00001-of-00002.safetensors"},
                            {"c", "model-00002-of-00002.safetensors"}}}};
  fs::create_directories(out / "fuzz_safetensors_index");
  std::ofstream(out / "fuzz_safetensors_index" / "index.json") << index.dump(2);
}

void gguf_seeds(const fs::path& out, const fs::path& tmp) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::of_string("glm4"));
  w.set("glm4.block_count", GgufValue::of_u32(1));
  w.set("glm4.rope.freq_base", GgufValue::of_f32(10000.0f));
  w.set("tokenizer.ggml.tokens", GgufValue::string_array({"a", "b", "ab"}));
  w.set("tokenizer.ggml.token_type", GgufValue::i32_array({1, 1, 1}));
  w.add_tensor("f32", {4, 2}, GgmlType::F32, [] { return std::vector<uint8_t>(32, 0); });
  w.add_tensor("q8", {32}, GgmlType::Q8_0, [] { return std::vector<uint8_t>(34, 1); });
  w.add_tensor("q4", {32}, GgmlType::Q4_0, [] { return std::vector<uint8_t>(18, 2); });
  w.write(tmp / "a.gguf");
  copy_into(tmp / "a.gguf", out / "fuzz_gguf", "small");
}

void training_state_seeds(const fs::path& out, const fs::path& tmp) {
  AdamW optimizer(fuzz::training_params(), {});
  TrainConfig config;
  TrainState state;
  state.step = 3;
  save_training_state(tmp / "checkpoint.h5", config, optimizer, state);
  copy_into(tmp / "checkpoint.h5", out / "fuzz_training_state", "checkpoint.h5");
}

void adapter_seeds(const fs::path& out, const fs::path& tmp) {
  for (const std::string format : {"peft", "mlx"}) {
    fuzz::write_adapter_fixture(tmp / format, format);
    copy_into(tmp / format / "adapter_config.json", out / ("fuzz_adapter_" + format),
              "adapter_config.json");
  }
}

// A small sentencepiece model trained by glm4's trainer: the real ones are ~1 MB, too slow to
// mutate at useful speed.
void sentencepiece_seeds(const fs::path& out, const fs::path& tmp) {
  std::ofstream corpus(tmp / "corpus.txt");
  const char* words[] = {"the",  "model", "learns", "to",   "answer",
                         "你好", "世界",  "data",   "cats", "7"};
  for (int line = 0; line < 200; ++line) {
    for (int w = 0; w < 6; ++w) corpus << words[(line * 7 + w * 3) % 10] << (w < 5 ? " " : "\n");
  }
  corpus.close();
  train_sentencepiece({tmp / "corpus.txt"}, 300, tmp / "sp");
  copy_into(tmp / "sp" / "tokenizer.model", out / "fuzz_sentencepiece", "trained.model");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds OUT_DIR\n");
    return 2;
  }
  const fs::path out = argv[1];
  const fs::path tmp = out / ".tmp";
  try {
    fs::create_directories(tmp);
    safetensors_seeds(out, tmp);
    gguf_seeds(out, tmp);
    training_state_seeds(out, tmp);
    adapter_seeds(out, tmp);
    sentencepiece_seeds(out, tmp);
    fs::remove_all(tmp);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_make_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
