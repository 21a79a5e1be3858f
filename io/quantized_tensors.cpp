// Reading and laying out quantized modules; every check names the file and the key at fault.
#include "io/quantized_tensors.h"

#include "base/check.h"

namespace glm4 {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

const TensorInfo& require(const TensorInfo* t, const std::string& where, const char* suffix) {
  GLM4_CHECK(t != nullptr, "[quantized] ", where, suffix,
             " missing (an affine-quantized module needs weight, scales and biases)");
  return *t;
}

}  // namespace

QuantizedMatrix quantized_module_view(const SafetensorsFile& file, std::string_view module,
                                      QuantFormat format) {
  const std::string prefix(module);
  return quantized_module_view(file.find(prefix + ".weight"), file.find(prefix + ".scales"),
                               file.find(prefix + ".biases"), file.path().string() + ": " + prefix,
                               format);
}

QuantizedMatrix quantized_module_view(const TensorInfo* weight, const TensorInfo* scales,
                                      const TensorInfo* biases, const std::string& where,
                                      QuantFormat format) {
  check_quant_format(format, where);
  const TensorInfo& w = require(weight, where, ".weight");
  const TensorInfo& s = require(scales, where, ".scales");
  const TensorInfo& b = require(biases, where, ".biases");
  GLM4_CHECK(w.dtype == "U32" && w.shape.size() == 2, "[quantized] ", where,
             ".weight: packed codes must be U32 [out, in * bits / 32], got ", w.dtype, " ",
             shape_str(w.shape));
  const DType dt = s.float_dtype();
  GLM4_CHECK(s.shape.size() == 2, "[quantized] ", where,
             ".scales must be 2-D [out, in / group], got ", shape_str(s.shape));
  GLM4_CHECK(b.dtype == s.dtype && b.shape == s.shape, "[quantized] ", where, ".biases ", b.dtype,
             " ", shape_str(b.shape), " must match scales ", s.dtype, " ", shape_str(s.shape));
  const int64_t rows = w.shape[0], words = w.shape[1];
  GLM4_CHECK(s.shape[0] == rows, "[quantized] ", where, ".scales ", shape_str(s.shape),
             " and weight ", shape_str(w.shape), " disagree on out_features");
  GLM4_CHECK(words * 32 % format.bits == 0, "[quantized] ", where, ".weight ", shape_str(w.shape),
             " does not hold a whole number of ", format.bits, "-bit codes a row");
  const int64_t cols = words * 32 / format.bits;
  GLM4_CHECK(cols % format.group_size == 0, "[quantized] ", where, ": group_size ",
             format.group_size, " does not divide in_features ", cols, " (weight ",
             shape_str(w.shape), " at ", format.bits, " bits)");
  GLM4_CHECK(s.shape[1] == cols / format.group_size, "[quantized] ", where, ".weight ",
             shape_str(w.shape), " holds ", cols, " ", format.bits,
             "-bit codes a row, so group_size ", format.group_size, " needs scales [", rows, ", ",
             cols / format.group_size, "], got ", shape_str(s.shape));
  QuantizedMatrix q;
  q.packed = reinterpret_cast<const uint8_t*>(w.data);
  q.scales = s.data;
  q.biases = b.data;
  q.scale_dtype = dt;
  q.bits = format.bits;
  q.group_size = format.group_size;
  q.rows = rows;
  q.cols = cols;
  check_quantized(q, where);
  return q;
}

std::vector<TensorToWrite> quantized_module_tensors(const std::string& module,
                                                    const QuantizedStorage& q) {
  return quantized_module_tensors(module, q.view());
}

std::vector<TensorToWrite> quantized_module_tensors(const std::string& module,
                                                    const QuantizedMatrix& q) {
  const int64_t groups = q.groups();
  const size_t params = size_t(q.rows * groups) * dtype_size(q.scale_dtype);
  return {
      {module + ".weight",
       "U32",
       {q.rows, q.cols * q.bits / 32},
       q.packed,
       size_t(q.rows * q.row_bytes())},
      {module + ".scales", dtype_name(q.scale_dtype), {q.rows, groups}, q.scales, params},
      {module + ".biases", dtype_name(q.scale_dtype), {q.rows, groups}, q.biases, params},
  };
}

}  // namespace glm4
