// A model directory copied tensor by tensor through an edit (edited_model_copy.h).
#include "tests/support/edited_model_copy.h"

namespace glm4::testing {

EditedTensor edited_tensor(const TensorInfo& t) {
  return {t.name, t.dtype, t.shape, std::vector<std::byte>(t.data, t.data + t.nbytes)};
}

void copy_model_edited(const std::filesystem::path& from, const std::filesystem::path& out,
                       const std::function<bool(EditedTensor&)>& edit,
                       std::vector<EditedTensor> extra) {
  std::filesystem::create_directories(out);
  std::filesystem::copy_file(from / "config.json", out / "config.json");
  auto file = SafetensorsFile::open(from / "model.safetensors");
  std::vector<EditedTensor> kept = std::move(extra);
  for (const TensorInfo& t : file->tensors()) {
    EditedTensor e = edited_tensor(t);
    if (edit(e)) kept.push_back(std::move(e));
  }
  std::vector<TensorToWrite> w;
  for (const EditedTensor& e : kept)
    w.push_back({e.name, e.dtype, e.shape, e.bytes.data(), e.bytes.size()});
  write_safetensors(out / "model.safetensors", w);
}

}  // namespace glm4::testing
