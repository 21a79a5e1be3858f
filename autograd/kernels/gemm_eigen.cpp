// The Eigen tile kernel: one single-threaded Eigen product per tile, used instead of OpenBLAS
// where Eigen's own kernels are the faster (see tile_backend() in gemm_openblas.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // Eigen's AVX-512 headers under GCC 12
#include <Eigen/Core>

#include "autograd/kernels/gemm_internal.h"

namespace glm4::gemm_detail {

namespace {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstView = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
using View = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;

template <typename A, typename B>
void accumulate(View& c, float alpha, float beta, const A& a, const B& b) {
  if (beta == 0.0f) {
    c.noalias() = alpha * (a * b);
  } else {
    if (beta != 1.0f) c *= beta;
    c.noalias() += alpha * (a * b);
  }
}
}  // namespace

void eigen_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                 int64_t ldc) {
  View C(c, m, n, Eigen::OuterStride<>(ldc));
  ConstView A(a, trans_a ? k : m, trans_a ? m : k, Eigen::OuterStride<>(lda));
  ConstView B(b, trans_b ? n : k, trans_b ? k : n, Eigen::OuterStride<>(ldb));
  if (trans_a && trans_b)
    accumulate(C, alpha, beta, A.transpose(), B.transpose());
  else if (trans_a)
    accumulate(C, alpha, beta, A.transpose(), B);
  else if (trans_b)
    accumulate(C, alpha, beta, A, B.transpose());
  else
    accumulate(C, alpha, beta, A, B);
}

}  // namespace glm4::gemm_detail
