// Value-level helpers on tensors that record nothing: used by the engine, the optimizer and
// backward formulas.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "autograd/tensor.h"

namespace glm4 {

Tensor add_values(const Tensor& a, const Tensor& b);  // same shapes, new tensor
void add_into(Tensor dst, const Tensor& src);         // dst += src, same shapes
// dst[rows[i]] += src[i] for [., width] matrices; rows distinct (they run in parallel).
void add_rows(Tensor dst, const Tensor& src, const std::vector<int64_t>& rows);
void scale_into(Tensor dst, float s);  // dst *= s
// Throws glm4::Error naming `op`, the row and its place unless every row is in [0, source rows).
void check_rows_within(const char* op, std::span<const int64_t> rows, const Tensor& source);
// True when every row is larger than the one before: distinct rows, whose gradients can go back
// as rows alone (Node::set_grad_rows).
bool strictly_increasing(std::span<const int64_t> rows);
// dst[i] = src[rows[i]] for [., width] row-major matrices (rows may repeat).
void copy_rows(const float* src, std::span<const int64_t> rows, int64_t width, float* dst);

}  // namespace glm4
