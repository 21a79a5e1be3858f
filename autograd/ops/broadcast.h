// Numpy-style broadcasting of up to 4-D shapes: the output shape and, per operand, strides
// with 0 on broadcast dimensions.
#pragma once
#include <array>
#include <cstdint>

#include "autograd/tensor.h"

namespace glm4::ops::detail {

struct Broadcast {
  Shape out;
  std::array<int64_t, 4> dims{1, 1, 1, 1};        // out, right-aligned into 4 dims
  std::array<int64_t, 4> stride_a{}, stride_b{};  // element strides, 0 where broadcast
};

// Throws "[op] shapes (..) and (..) do not broadcast" when incompatible.
Broadcast broadcast(const char* op, const Shape& a, const Shape& b);

// Calls fn(out_index, a_index, b_index) for every output element, in order.
template <typename Fn>
void for_each_broadcast(const Broadcast& bc, Fn&& fn) {
  int64_t o = 0;
  for (int64_t i0 = 0; i0 < bc.dims[0]; ++i0)
    for (int64_t i1 = 0; i1 < bc.dims[1]; ++i1)
      for (int64_t i2 = 0; i2 < bc.dims[2]; ++i2) {
        int64_t ia = i0 * bc.stride_a[0] + i1 * bc.stride_a[1] + i2 * bc.stride_a[2];
        int64_t ib = i0 * bc.stride_b[0] + i1 * bc.stride_b[1] + i2 * bc.stride_b[2];
        for (int64_t i3 = 0; i3 < bc.dims[3]; ++i3, ++o)
          fn(o, ia + i3 * bc.stride_a[3], ib + i3 * bc.stride_b[3]);
      }
}

}  // namespace glm4::ops::detail
