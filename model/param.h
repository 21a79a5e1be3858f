// One tensor of the model as the checkpoint names it: a frozen matrix kept in its stored dtype
// (Weight), or an fp32 tensor (norm weights and biases always; matrices when fully trained).
#pragma once
#include <functional>
#include <string>

#include "autograd/tensor.h"
#include "autograd/weight.h"

namespace glm4 {

struct Param {
  Shape shape;     // what the config says it must be
  Weight frozen;   // set for matrices that are not trained
  Tensor value;    // set for fp32 tensors (trainable or small)

  bool loaded() const { return value.defined() || !frozen.empty(); }
  bool is_matrix() const { return shape.size() == 2; }
  // Makes the parameter an fp32 leaf with requires_grad (--full training).
  void make_trainable();
  // Widened fp32 copy of the values, whatever the storage.
  Tensor to_f32() const;
};

// The one list of the model's tensors: visit(name, param) with the checkpoint key as name.
using ParamVisitor = std::function<void(const std::string& name, Param& param)>;
// The LoRA tensors: visit(module_path, "lora_A" | "lora_B", tensor).
using LoraVisitor =
    std::function<void(const std::string& module, const char* which, Tensor& tensor)>;

}  // namespace glm4
