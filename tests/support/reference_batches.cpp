#include "tests/support/reference_batches.h"

#include <string>

#include "dataset/dataset.h"
#include "tests/support/fixture_logits.h"

namespace glm4::testing {

Batch fixture_train_batch(const SafetensorsFile& file, int step, int micro) {
  const std::string p = "step" + std::to_string(step) + ".micro" + std::to_string(micro) + ".";
  const TensorInfo& ids = file.at(p + "input_ids");
  const int64_t B = ids.shape[0], T = ids.shape[1];
  const std::vector<int64_t> all_ids = read_int(ids), all_labels = read_int(file.at(p + "labels"));
  const std::vector<int64_t> lengths = read_int(file.at(p + "lengths"));
  std::vector<Example> rows(static_cast<size_t>(B));
  for (int64_t r = 0; r < B; ++r)
    for (int64_t t = 0; t < lengths[size_t(r)]; ++t) {
      rows[size_t(r)].ids.push_back(int32_t(all_ids[size_t(r * T + t)]));
      rows[size_t(r)].labels.push_back(int32_t(all_labels[size_t(r * T + t)]));
    }
  return make_batch(rows, 0, B, 0);
}

double max_abs_error(const Tensor& ours, const std::vector<float>& ref) {
  return max_abs_error(std::vector<float>(ours.data(), ours.data() + ours.numel()), ref);
}

double max_relative_error(const Tensor& ours, const std::vector<float>& ref) {
  return max_relative_error(std::vector<float>(ours.data(), ours.data() + ours.numel()), ref);
}

}  // namespace glm4::testing
