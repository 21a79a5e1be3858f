// Test helper: a copy of a one-file model directory whose tensors went through an edit, for the
// loaders' error and layout tests.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace glm4::testing {

struct EditedTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
};

// A copy of file tensor `t` (name, dtype, shape and bytes), to edit or to append.
EditedTensor edited_tensor(const TensorInfo& t);

// Copies `from`'s config.json and model.safetensors to `out`, each tensor through `edit` (which
// may change its name, dtype, shape and bytes; false drops it), then `extra` appended.
void copy_model_edited(const std::filesystem::path& from, const std::filesystem::path& out,
                       const std::function<bool(EditedTensor&)>& edit,
                       std::vector<EditedTensor> extra = {});

}  // namespace glm4::testing
