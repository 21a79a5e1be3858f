// One tensor of the model as its file names it: a frozen matrix kept in its stored format
// (Weight), or an fp32 tensor (norm weights and biases always; matrices once trained).
#pragma once
#include <functional>
#include <span>
#include <string>

#include "autograd/compute_dtype.h"
#include "autograd/tensor.h"
#include "autograd/weight.h"

namespace glm4 {

struct Param {
  Shape shape;    // what the config says it must be
  Weight frozen;  // set for matrices that are not trained
  Tensor value;   // set for fp32 tensors (trainable or small)

  // The one rule for how a parameter is held: a matrix keeps `stored` as it is (frozen, in its
  // dtype, a view of the file where it was mapped); a vector (norm weight, bias) is widened to an
  // fp32 value. Throws when the element count is not the shape's.
  void assign(Weight stored);
  // Makes the parameter an fp32 leaf with requires_grad (--full training).
  void make_trainable();
  bool loaded() const { return value.defined() || !frozen.empty(); }
  bool is_matrix() const { return shape.size() == 2; }
  // Widened fp32 copy of the values, whatever the storage.
  Tensor to_f32() const;
};

// x [..., in] W^T + bias with W frozen (multiplied as `compute` says) or trainable, whichever
// the parameter holds. `values` false: a frozen W's product is skipped (ops::linear).
Tensor linear(const Tensor& x, const Param& w, const Tensor& bias, const ComputeChoice& compute,
              bool values = true);
// Rows `ids` of the table [vocab, hidden]; a graph only when the table is trainable.
Tensor embedding(std::span<const int32_t> ids, const Param& table);

// The one list of the model's tensors: visit(name, param) with the file's key as name.
using ParamVisitor = std::function<void(const std::string& name, Param& param)>;

}  // namespace glm4
