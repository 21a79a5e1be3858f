// Row-major fp32 GEMM and the three products of a linear layer, on fp32 matrices or on frozen
// Weights in their stored dtype. All threading is TBB (glm4::parallel_for): the output is cut
// into tiles and each task runs a single-threaded sgemm on its tile (OpenBLAS, or Eigen where
// OpenBLAS runs pre-AVX-512 kernels on an AVX-512 build: gemm_detail::tile_backend()); bf16 /
// f16 weight blocks are widened tile by tile into a small thread-local buffer, never the whole
// matrix.
// Results do not depend on the thread count (the tiling depends on the shapes only).
#pragma once
#include <cstdint>

#include "autograd/compute_dtype.h"
#include "autograd/weight.h"

namespace glm4 {

// C[M, N] = alpha * op(A) op(B) + beta * C, where op(A) is [M, K] and op(B) is [K, N]; A is
// [M, K] (lda >= K) or, with trans_a, [K, M] (lda >= M); likewise B. beta = 0 overwrites C
// (even NaN there).
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// Y[M, N] (+)= X[M, K] W[N, K]^T, W in any stored dtype. M = 1 (decode) runs at memory speed.
// A bf16 W under BF16 `compute` runs its bf16 kernel (autograd/kernels/bf16_gemm.h), here and in
// linear_input_grad. A quantized W runs the quantized kernels (quant_linear.h), or from
// kQuantPanelRows rows under BF16 compute the bf16 kernels on panels packed from its codes
// (gemm_internal.h); an f16 W above kQuantStreamRows rows the bf16 kernels on panels widened
// and rounded to bf16.
void linear_forward(const float* X, int64_t M, int64_t K, const Weight& W, float* Y,
                    bool accumulate, const ComputeChoice& compute);
// Whether linear_forward runs a 4-bit W's product of `rows` rows on the int8 dot products
// (AVX512-VNNI or AVX2) under `compute` (what the kernel report states).
bool linear_forward_uses_int8(int64_t rows, const ComputeChoice& compute);

// dX[M, K] (+)= dY[M, N] W[N, K]: the input gradient of linear_forward.
void linear_input_grad(const float* dY, int64_t M, int64_t N, const Weight& W, float* dX,
                       bool accumulate, const ComputeChoice& compute);

// dW[N, K] (+)= dY[M, N]^T X[M, K]: the weight gradient, for trainable fp32 weights.
void linear_weight_grad(const float* dY, const float* X, int64_t M, int64_t N, int64_t K, float* dW,
                        bool accumulate);

// Sets up OpenBLAS once: single-threaded calls (TBB owns the threads) and, on AVX-512 CPUs
// that Debian's OpenBLAS 0.3.21 does not recognise (it falls back to older kernels: Haswell, or
// even Prescott's SSE3), its AVX-512 (SkylakeX) kernels, unless the user set OPENBLAS_CORETYPE.
// Every entry point above calls it; code that calls cblas_* directly must call it first.
void init_blas();
// The OpenBLAS kernel family in use ("SkylakeX", "Haswell", ...), after init_blas().
const char* blas_core_name();

}  // namespace glm4
