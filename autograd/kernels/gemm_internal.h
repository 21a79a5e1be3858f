// Internal to gemm*.cpp: the small-M (decode) kernels and the tuning constants they share.
#pragma once
#include <cstdint>

#include "autograd/kernels/kernel_selection.h"
#include "base/dtype.h"

namespace glm4::gemm_detail {

// Rows of X up to which linear_input_grad uses the bandwidth kernels below instead of sgemm
// tiles; linear_forward uses them up to kSmallMForward rows (a batch of decode steps of several
// sequences reads W once, and each row's result is the same as alone).
constexpr int64_t kSmallM = 4;
constexpr int64_t kSmallMForward = 16;

// Y[M, N] (+)= X[M, K] W[N, K]^T for M <= kSmallMForward; W row-major in `dtype` with row stride K.
void small_m_forward(const float* X, int64_t M, int64_t K, DType dtype, const void* W, int64_t N,
                     float* Y, bool accumulate);

// dX[M, K] (+)= dY[M, N] W[N, K] for M <= kSmallM.
void small_m_input_grad(const float* dY, int64_t M, int64_t N, DType dtype, const void* W,
                        int64_t K, float* dX, bool accumulate);

// C[m, n] = alpha op(A) op(B) + beta C with Eigen's kernels, single-threaded (row-major, strided).
void eigen_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                 int64_t ldc);

// Which kernel runs the sgemm tiles: kernel_selection().fp32, fixed per process.
using kernels::Fp32Backend;
Fp32Backend tile_backend();
// The backend this CPU runs faster, what GLM4_GEMM overrides (gemm_openblas.cpp).
Fp32Backend default_tile_backend();

}  // namespace glm4::gemm_detail
