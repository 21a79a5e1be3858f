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

const TensorInfo& require(const SafetensorsFile& file, const std::string& key,
                          std::string_view why) {
  const TensorInfo* t = file.find(key);
  GLM4_CHECK(t != nullptr, "[quantized] ", file.path().string(), ": ", key, " missing", why);
  return *t;
}

}  // namespace

QuantizedMatrix quantized_module_view(const SafetensorsFile& file, std::string_view module,
                                      QuantFormat format) {
  const std::string prefix(module), where = file.path().string() + ": " + prefix;
  check_quant_format(format, where);
  const char* why = " (an affine-quantized module needs weight, scales and biases)";
  const TensorInfo& w = require(file, prefix + ".weight", why);
  const TensorInfo& s = require(file, prefix + ".scales", why);
  const TensorInfo& b = require(file, prefix + ".biases", why);
  GLM4_CHECK(w.dtype == "U32" && w.shape.size() == 2, "[quantized] ", where,
             ".weight: packed codes must be U32 [out, in * bits / 32], got ", w.dtype, " ",
             shape_str(w.shape));
  const DType dt = s.float_dtype();
  GLM4_CHECK(s.shape.size() == 2, "[quantized] ", where, ".scales must be 2-D [out, in / group], got ",
             shape_str(s.shape));
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
  const int64_t groups = q.cols / q.group_size;
  return {
      {module + ".weight", "U32", {q.rows, q.cols * q.bits / 32}, q.packed.data(),
       q.packed.size() * sizeof(uint32_t)},
      {module + ".scales", dtype_name(q.scale_dtype), {q.rows, groups}, q.scales.data(),
       q.scales.size()},
      {module + ".biases", dtype_name(q.scale_dtype), {q.rows, groups}, q.biases.data(),
       q.biases.size()},
  };
}

}  // namespace glm4
