// Builds the data sets' TextEncoder from a model directory's tokenizer and chat format. The
// tokenizer is loaded on first use, so pre-tokenized data needs no tokenizer files.
#pragma once
#include <filesystem>

#include "train/dataset.h"

namespace glm4 {

TextEncoder make_text_encoder(const std::filesystem::path& model_dir);

}  // namespace glm4
