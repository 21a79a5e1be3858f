// Internal to gemm*.cpp: the small-M (decode) kernels and the tuning constants they share.
#pragma once
#include <cstdint>

#include "autograd/compute_dtype.h"
#include "autograd/kernels/kernel_selection.h"
#include "autograd/weight.h"
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

// small_m_forward for rows [n0, n1) of W only, on the calling thread: each output the same sum.
void small_m_forward_rows(const float* X, int64_t M, int64_t K, DType dtype, const void* W,
                          int64_t N, int64_t n0, int64_t n1, float* Y, bool accumulate);

// Which kernel linear_forward gives a product with M rows of W (gemm_tiles.cpp):
// a bf16 weight the bf16 units take;
bool use_bf16_kernels(const Weight& W, int64_t M, const ComputeChoice& compute);
// an f16 weight at prefill and training sizes the bf16 units take, each task converting its own
// weight panel (decode sizes read the stored form);
bool use_bf16_panel_kernels(int64_t M, const ComputeChoice& compute);
// the input gradient of a quantized weight from a few rows on (more than kDecodeMaxM, which the
// fp32 stripes stream): its packs cost less than the fp32 path's dequantized tiles for sgemm;
bool use_bf16_quant_grad_kernels(int64_t M, const ComputeChoice& compute);
// a quantized weight's forward from kQuantPanelRows rows on (the int8 decode kernels below
// re-run their dot products for every 4 rows of X; the panels pay their packing once: on a Zen 4
// expert's shape, 0.74 ms against 0.96 at 16 rows and 1.19 against 1.46-1.95 at 24-32);
constexpr int64_t kQuantPanelRows = 13;
bool use_bf16_quant_forward_kernels(int64_t M, const ComputeChoice& compute);
// a quantized weight the bf16 units do not take (callers ask them first), at any size, on the int8
// dot products: under bf16 compute, whose rounding of X they undercut (quant_linear.h); decode
// sizes stream the codes, larger ones run the int8 GEMM.
bool use_int8_quant_kernels(const Weight& W, const ComputeChoice& compute);

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
