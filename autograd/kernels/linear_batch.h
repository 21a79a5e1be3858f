// Several decode-sized products of a linear layer run in one parallel region. A Mixture-of-Experts
// layer decoding one token runs about 16 one-row products (the chosen experts' and the shared
// expert's projections), each reading 0.1-2 MB; as separate parallel loops on two threads their
// forks and joins cost about as much as reading the weights. Here the rows of every weight are
// cut into blocks of similar bytes and one parallel loop runs all the blocks (what llama.cpp's
// mul_mat_id does for the experts).
#pragma once
#include <cstdint>
#include <span>

#include "autograd/compute_dtype.h"
#include "autograd/weight.h"

namespace glm4 {

// Y[M, W.rows()] = X[M, W.cols()] W^T.
struct LinearProduct {
  const float* X = nullptr;
  int64_t M = 0;
  const Weight* W = nullptr;
  float* Y = nullptr;
  const ComputeChoice* compute = nullptr;  // how this product runs; null: the batch's choice
};

// Every product as linear_forward(X, M, K, *W, Y, false, compute) computes it (with its own
// compute when it names one), to the bit. Products whose kernel has a row-range form (decode
// sizes: bf16 on the bf16 units, int8 decode of 4- and 8-bit weights and their fp32 decode, fp32 /
// f16 / bf16 small-M) share the one parallel loop; the others (prefill sizes) run one after
// another with their own. Returns how many shared it.
int64_t linear_forward_batch(std::span<const LinearProduct> products, const ComputeChoice& compute);

}  // namespace glm4
