// Trains a sentencepiece BPE tokenizer whose special tokens are the GLM-4 ones, so that models
// trained from scratch use the GLM-4 chat format.
#pragma once
#include <filesystem>
#include <vector>

namespace glm4 {

// Trains on the lines of `inputs` (UTF-8 text, one sentence per line) and writes
// out_dir/tokenizer.model and out_dir/tokenizer_config.json (atomically; out_dir is created).
// BPE with byte fallback, digits split, identity normalization (decode(encode(text)) == text), no
// dummy prefix, the GLM-4 special tokens as user-defined symbols. Deterministic: one thread, the
// first kMaxSentences lines in file order. Throws glm4::Error naming the file or setting at fault.
void train_sentencepiece(const std::vector<std::filesystem::path>& inputs, int vocab_size,
                         const std::filesystem::path& out_dir);

}  // namespace glm4
