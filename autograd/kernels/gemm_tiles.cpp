// The tiled GEMM driver: output tiles run in parallel on TBB, each one a sequence of
// single-threaded OpenBLAS (or Eigen, see tile_backend()) calls over blocks of the reduction
// dimension; stored-dtype weight blocks are widened into a thread-local buffer just before
// their call.
#include <cblas.h>

#include <algorithm>
#include <vector>

#include "autograd/kernels/bf16_gemm.h"
#include "autograd/kernels/convert.h"
#include "autograd/kernels/gemm.h"
#include "autograd/kernels/gemm_internal.h"
#include "autograd/kernels/quant_kernels.h"
#include "autograd/kernels/quant_linear.h"
#include "base/check.h"
#include "base/parallel.h"

namespace glm4 {

namespace {

constexpr int64_t kPanelN = 256;       // output columns per tile
constexpr int64_t kMinPanelM = 128;    // rows per tile when rows are split too
constexpr int64_t kTargetTiles = 8;    // enough tiles to balance a few threads
constexpr int64_t kLinearKb = 512;     // reduction block of the linear products
constexpr double kMinTileFlops = 4e6;  // below this a task costs more than it saves

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t m) { return ceil_div(a, m) * m; }

// The B operand: fp32 or a stored-dtype weight; [N, K] when trans, else [K, N]; row stride ld.
struct BOperand {
  DType dtype;
  const void* data;
  int64_t ld;
  bool trans;
};

struct Problem {
  bool trans_a;
  int64_t M, N, K;
  float alpha;
  const float* A;
  int64_t lda;
  BOperand B;
  float beta;
  float* C;
  int64_t ldc;
  int64_t kb;  // reduction block
};

struct TilePlan {
  int64_t mb, nb;  // tile height and width
  int64_t tiles_m, tiles_n;
};

// Depends on the shape only, so results do not change with the number of threads.
TilePlan plan_tiles(int64_t M, int64_t N) {
  TilePlan p;
  p.tiles_n = ceil_div(N, kPanelN);
  p.nb = std::min(N, round_up(ceil_div(N, p.tiles_n), 16));
  p.tiles_n = ceil_div(N, p.nb);
  p.tiles_m = 1;
  if (p.tiles_n < kTargetTiles)
    p.tiles_m = std::min(ceil_div(kTargetTiles, p.tiles_n), std::max<int64_t>(1, M / kMinPanelM));
  p.mb = std::min(M, round_up(ceil_div(M, p.tiles_m), 8));
  p.tiles_m = ceil_div(M, p.mb);
  return p;
}

void scale_c(int64_t M, int64_t N, float beta, float* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    float* c = C + i * ldc;
    if (beta == 0.0f) {
      std::fill(c, c + N, 0.0f);
    } else if (beta != 1.0f) {
      for (int64_t j = 0; j < N; ++j) c[j] *= beta;
    }
  }
}

void run_tile(const Problem& p, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  thread_local std::vector<float> widened;  // one weight block at a time, as fp32
  const BOperand& B = p.B;
  for (int64_t k0 = 0; k0 < p.K; k0 += p.kb) {
    const int64_t k1 = std::min(p.K, k0 + p.kb);
    const float* a = p.trans_a ? p.A + k0 * p.lda + i0 : p.A + i0 * p.lda + k0;
    const int64_t b_offset = B.trans ? j0 * B.ld + k0 : k0 * B.ld + j0;
    const float* b;
    int64_t ldb;
    if (B.dtype == DType::F32) {
      b = static_cast<const float*>(B.data) + b_offset;
      ldb = B.ld;
    } else {
      const int64_t rows = B.trans ? j1 - j0 : k1 - k0;
      const int64_t cols = B.trans ? k1 - k0 : j1 - j0;
      if (widened.size() < size_t(rows * cols)) widened.resize(size_t(rows * cols));
      convert_block_to_f32(B.dtype, element_ptr(B.dtype, B.data, b_offset), B.ld, rows, cols,
                           widened.data());
      b = widened.data();
      ldb = cols;
    }
    const float beta = k0 == 0 ? p.beta : 1.0f;
    float* c = p.C + i0 * p.ldc + j0;
    if (gemm_detail::tile_backend() == gemm_detail::Fp32Backend::kEigen)
      gemm_detail::eigen_sgemm(p.trans_a, B.trans, i1 - i0, j1 - j0, k1 - k0, p.alpha, a, p.lda, b,
                               ldb, beta, c, p.ldc);
    else
      cblas_sgemm(CblasRowMajor, p.trans_a ? CblasTrans : CblasNoTrans,
                  B.trans ? CblasTrans : CblasNoTrans, int(i1 - i0), int(j1 - j0), int(k1 - k0),
                  p.alpha, a, int(p.lda), b, int(ldb), beta, c, int(p.ldc));
  }
}

void run_tiled(const Problem& p) {
  if (p.M == 0 || p.N == 0) return;
  if (p.K == 0 || p.alpha == 0.0f) {  // C = beta * C
    scale_c(p.M, p.N, p.beta, p.C, p.ldc);
    return;
  }
  init_blas();
  const TilePlan plan = plan_tiles(p.M, p.N);
  const int64_t tiles = plan.tiles_m * plan.tiles_n;
  const double tile_flops = 2.0 * double(plan.mb) * double(plan.nb) * double(p.K);
  const int64_t grain = std::max<int64_t>(1, int64_t(kMinTileFlops / tile_flops));
  parallel_for(tiles, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t tm = t % plan.tiles_m, tn = t / plan.tiles_m;
      const int64_t i0 = tm * plan.mb, j0 = tn * plan.nb;
      run_tile(p, i0, std::min(p.M, i0 + plan.mb), j0, std::min(p.N, j0 + plan.nb));
    }
  });
}

const uint16_t* u16_data(const Weight& W) { return static_cast<const uint16_t*>(W.data()); }

void check_ptr(const char* op, const void* ptr, const char* name, int64_t count) {
  GLM4_CHECK(ptr != nullptr || count == 0, "[", op, "] ", name, " is null");
}

}  // namespace

namespace gemm_detail {
bool use_bf16_kernels(const Weight& W, int64_t M, const ComputeChoice& compute) {
  return W.dtype() == DType::BF16 && compute.bf16_units_take(M);
}

bool use_bf16_panel_kernels(int64_t M, const ComputeChoice& compute) {
  return M > kQuantStreamRows && compute.bf16_units_take(M);
}

bool use_bf16_quant_forward_kernels(int64_t M, const ComputeChoice& compute) {
  return M >= kQuantPanelRows && compute.bf16_units_take(M);
}

bool use_bf16_quant_grad_kernels(int64_t M, const ComputeChoice& compute) {
  return M > quant_detail::kDecodeMaxM && compute.bf16_units_take(M);
}

bool use_int8_quant_kernels(const Weight& W, const ComputeChoice& compute) {
  return compute.reduced_precision() && quant_int8_supported(W.quant());
}

}  // namespace gemm_detail

bool linear_forward_uses_int8(int64_t rows, const ComputeChoice& compute) {
  return !gemm_detail::use_bf16_quant_forward_kernels(rows, compute) &&
         compute.reduced_precision() && quant_int8_available();
}

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  GLM4_CHECK(M >= 0 && N >= 0 && K >= 0, "[sgemm] negative size M=", M, " N=", N, " K=", K);
  GLM4_CHECK(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX, "[sgemm] size too large M=", M,
             " N=", N, " K=", K);
  GLM4_CHECK(lda >= std::max<int64_t>(1, trans_a ? M : K) && lda <= INT32_MAX, "[sgemm] lda=", lda,
             " too small for A ", trans_a ? "[K, M]" : "[M, K]", " with M=", M, " K=", K);
  GLM4_CHECK(ldb >= std::max<int64_t>(1, trans_b ? K : N) && ldb <= INT32_MAX, "[sgemm] ldb=", ldb,
             " too small for B ", trans_b ? "[N, K]" : "[K, N]", " with K=", K, " N=", N);
  GLM4_CHECK(ldc >= std::max<int64_t>(1, N) && ldc <= INT32_MAX, "[sgemm] ldc=", ldc,
             " too small for C [M, N] with N=", N);
  check_ptr("sgemm", A, "A", M * K);
  check_ptr("sgemm", B, "B", K * N);
  check_ptr("sgemm", C, "C", M * N);
  run_tiled({trans_a, M, N, K, alpha, A, lda, {DType::F32, B, ldb, trans_b}, beta, C, ldc, K});
}

void linear_forward(const float* X, int64_t M, int64_t K, const Weight& W, float* Y,
                    bool accumulate, const ComputeChoice& compute) {
  const int64_t N = W.rows();
  GLM4_CHECK(M >= 0 && K == W.cols(), "[linear_forward] X [", M, ", ", K, "] does not match W [",
             W.rows(), ", ", W.cols(), "]");
  GLM4_CHECK(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX, "[linear_forward] size too large");
  check_ptr("linear_forward", X, "X", M * K);
  check_ptr("linear_forward", Y, "Y", M * N);
  if (W.is_quantized()) {
    if (gemm_detail::use_bf16_quant_forward_kernels(M, compute))
      kernels::bf16_quant_linear_forward(compute.kernel, X, M, K, W.quant(), Y, accumulate);
    else if (gemm_detail::use_int8_quant_kernels(W, compute))
      quant_linear_forward_int8(X, M, K, W.quant(), Y, accumulate);
    else
      quant_linear_forward(X, M, K, W.quant(), Y, accumulate);
    return;
  }
  if (gemm_detail::use_bf16_kernels(W, M, compute)) {
    kernels::bf16_linear_forward(compute.kernel, X, M, K, u16_data(W), N, Y, accumulate);
    return;
  }
  if (W.dtype() == DType::F16 && gemm_detail::use_bf16_panel_kernels(M, compute)) {
    kernels::bf16_f16_linear_forward(compute.kernel, X, M, K, u16_data(W), N, Y, accumulate);
    return;
  }
  if (M <= gemm_detail::kSmallMForward) {
    gemm_detail::small_m_forward(X, M, K, W.dtype(), W.data(), N, Y, accumulate);
    return;
  }
  run_tiled({false,
             M,
             N,
             K,
             1.0f,
             X,
             std::max<int64_t>(1, K),
             {W.dtype(), W.data(), std::max<int64_t>(1, K), true},
             accumulate ? 1.0f : 0.0f,
             Y,
             std::max<int64_t>(1, N),
             kLinearKb});
}

void linear_input_grad(const float* dY, int64_t M, int64_t N, const Weight& W, float* dX,
                       bool accumulate, const ComputeChoice& compute) {
  const int64_t K = W.cols();
  GLM4_CHECK(M >= 0 && N == W.rows(), "[linear_input_grad] dY [", M, ", ", N,
             "] does not match W [", W.rows(), ", ", W.cols(), "]");
  GLM4_CHECK(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX,
             "[linear_input_grad] size too large");
  check_ptr("linear_input_grad", dY, "dY", M * N);
  check_ptr("linear_input_grad", dX, "dX", M * K);
  if (W.is_quantized()) {
    if (gemm_detail::use_bf16_quant_grad_kernels(M, compute))
      kernels::bf16_quant_linear_input_grad(compute.kernel, dY, M, N, W.quant(), dX, accumulate);
    else
      quant_linear_input_grad(dY, M, N, W.quant(), dX, accumulate);
    return;
  }
  if (gemm_detail::use_bf16_kernels(W, M, compute)) {
    kernels::bf16_linear_input_grad(compute.kernel, dY, M, N, u16_data(W), K, dX, accumulate);
    return;
  }
  if (W.dtype() == DType::F16 && gemm_detail::use_bf16_panel_kernels(M, compute)) {
    kernels::bf16_f16_linear_input_grad(compute.kernel, dY, M, N, u16_data(W), K, dX, accumulate);
    return;
  }
  if (M <= gemm_detail::kSmallM) {
    gemm_detail::small_m_input_grad(dY, M, N, W.dtype(), W.data(), K, dX, accumulate);
    return;
  }
  run_tiled({false,
             M,
             K,
             N,
             1.0f,
             dY,
             std::max<int64_t>(1, N),
             {W.dtype(), W.data(), std::max<int64_t>(1, K), false},
             accumulate ? 1.0f : 0.0f,
             dX,
             std::max<int64_t>(1, K),
             kLinearKb});
}

void linear_weight_grad(const float* dY, const float* X, int64_t M, int64_t N, int64_t K, float* dW,
                        bool accumulate) {
  GLM4_CHECK(M >= 0 && N >= 0 && K >= 0, "[linear_weight_grad] negative size M=", M, " N=", N,
             " K=", K);
  sgemm(true, false, N, K, M, 1.0f, dY, std::max<int64_t>(1, N), X, std::max<int64_t>(1, K),
        accumulate ? 1.0f : 0.0f, dW, std::max<int64_t>(1, K));
}

}  // namespace glm4
