// The tensors of one mlx affine-quantized module in a safetensors file (PREFIX.weight uint32
// [out, in*bits/32], PREFIX.scales and PREFIX.biases [out, in/group] in the weight's float
// dtype): read as a checked zero-copy view, and laid out for writing.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "autograd/kernels/quantized_matrix.h"
#include "io/safetensors.h"

namespace glm4 {

// A view into `file`'s mapping (valid while the file lives) of module `module` (the key prefix,
// e.g. "model.layers.0.mlp.down_proj"), after checking the format, that all three tensors are
// present, their dtypes and that their shapes agree. Throws naming the file and the key.
QuantizedMatrix quantized_module_view(const SafetensorsFile& file, std::string_view module,
                                      QuantFormat format);

// The same over tensors found anywhere (a sharded model keeps a module's three tensors in
// whichever files they fell into); `where` names the module in errors, a null tensor is
// reported missing.
QuantizedMatrix quantized_module_view(const TensorInfo* weight, const TensorInfo* scales,
                                      const TensorInfo* biases, const std::string& where,
                                      QuantFormat format);

// MODULE.weight (U32), MODULE.scales and MODULE.biases pointing into `q` (which must outlive
// the returned list until it is written).
std::vector<TensorToWrite> quantized_module_tensors(const std::string& module,
                                                    const QuantizedStorage& q);
// The same for any view (a loaded module's mapping, say): the bytes are q's own.
std::vector<TensorToWrite> quantized_module_tensors(const std::string& module,
                                                    const QuantizedMatrix& q);

}  // namespace glm4
