// Fingerprints of what a training run reads, stored in its checkpoint so that --resume can tell
// whether it reads the same model and data: a short hash, not a proof.
#pragma once
#include <string>

#include "dataset/records.h"

namespace glm4 {

// The model directory: config.json, the tokenizer files, and each weight file's size, header and
// bytes sampled at 16 places (read in well under a second for any size). 16 hex digits.
std::string model_fingerprint(const std::string& model_dir);

// The training and validation files' whole contents (not their names: a moved data set is the
// same data). 16 hex digits.
std::string data_fingerprint(const DataFiles& files);

}  // namespace glm4
