// How load_model and the kv_b_proj split read a matrix's tensors out of the model files: the
// checks a dense tensor passes, and a stacked quantized module ([d0, d1, *] codes, scales and
// biases) viewed as one [d0 * d1, cols] affine matrix.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "autograd/tensor.h"
#include "base/dtype.h"
#include "io/model_files.h"
#include "io/quantized_tensors.h"

namespace glm4 {

// The dtype of dense tensor `t`, after checking that it holds no quantized codes and has the
// shape config.json gives; throws naming `dir` and the tensor.
DType dense_tensor_dtype(const TensorInfo& t, const Shape& expected, const std::string& dir);

// MODULE.{weight,scales,biases}, each [d0, d1, *], as one [d0 * d1, cols] matrix in `format`.
// The keys go into `used`; one absent the first time it is asked for goes into `missing`, and
// then nullopt comes back. `owners` (when given) receives the files holding the three parts.
std::optional<QuantizedMatrix> stacked_quantized_view(
    const ModelFiles& files, const std::string& module, int64_t d0, int64_t d1, QuantFormat format,
    const std::string& dir, std::set<std::string>& used, std::vector<std::string>& missing,
    std::vector<std::shared_ptr<const void>>* owners = nullptr);

}  // namespace glm4
