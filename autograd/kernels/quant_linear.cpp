// The quantized products: decode-sized ones through the per-ISA kernels (quant_kernels.h),
// larger ones as sgemm tiles on W dequantized block by block (the input gradient through the
// kernels' own tile kernel where they have one), threaded over output tiles whose shapes depend
// on the problem only.
#include "autograd/kernels/quant_linear.h"

#include <cblas.h>

#include <algorithm>
#include <vector>

#include "autograd/kernels/gemm.h"
#include "autograd/kernels/gemm_internal.h"
#include "autograd/kernels/quant_decode_int8.h"
#include "autograd/kernels/quant_gemm_int8.h"
#include "autograd/kernels/quant_kernels.h"
#include "base/check.h"
#include "base/parallel.h"

namespace glm4 {

namespace {

using quant_detail::kDecodeMaxM;

// Rows of X up to which the forward streams the packed codes (kDecodeMaxM rows a pass) instead
// of dequantizing tiles for sgemm: below about 48 rows re-reading the codes costs less than
// writing out fp32 tiles (5632 x 1024, 4 bits: 1.1 vs 3.3 ms at 8 rows, 4.4 vs 6.0 at 32). The
// input gradient streams up to kDecodeMaxM rows only; beyond that its tiles are faster.
constexpr int64_t kStreamRows = kQuantStreamRows;

// Rows of dY up to which the input gradient runs the kernels' own tile kernel (a routed expert's
// tokens in a MoE training step): 7-20% faster than sgemm on dequantized tiles at 128 rows on
// AVX-512, 0-12% slower at 512 to 2,048, where OpenBLAS's packing pays for itself.
constexpr int64_t kTileKernelMaxRows = 256;
constexpr int64_t kPanel = 256;             // output columns per tile (a multiple of 128)
constexpr int64_t kMinPanelM = 128;         // rows per tile when rows are split too
constexpr int64_t kTargetTiles = 8;         // enough tiles to balance a few threads
constexpr int64_t kReduceBlock = 512;       // reduction block (a multiple of 128)
constexpr double kMinTileFlops = 4e6;       // below this a task costs more than it saves
constexpr int64_t kMinTaskBytes = 1 << 16;  // packed bytes a decode task should read at least

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t m) { return ceil_div(a, m) * m; }

struct TilePlan {
  int64_t mb, nb, tiles_m, tiles_n;
};

// Tiles of an [M, N] output; widths are multiples of `align`. Depends on the shape only.
TilePlan plan_tiles(int64_t M, int64_t N, int64_t align) {
  TilePlan p;
  p.tiles_n = ceil_div(N, kPanel);
  p.nb = std::min(N, round_up(ceil_div(N, p.tiles_n), align));
  p.tiles_n = ceil_div(N, p.nb);
  p.tiles_m = 1;
  if (p.tiles_n < kTargetTiles)
    p.tiles_m = std::min(ceil_div(kTargetTiles, p.tiles_n), std::max<int64_t>(1, M / kMinPanelM));
  p.mb = std::min(M, round_up(ceil_div(M, p.tiles_m), 8));
  p.tiles_m = ceil_div(M, p.mb);
  return p;
}

// C[m, n] = A[m, k] op(B) + beta C, single-threaded, with the backend of gemm.cpp's tiles.
void sgemm_tile(bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (gemm_detail::tile_backend() == gemm_detail::Fp32Backend::kEigen)
    gemm_detail::eigen_sgemm(false, trans_b, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, int(m), int(n),
                int(k), 1.0f, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

// Runs tile(i0, i1, j0, j1) over the tiles of plan on TBB.
template <typename Tile>
void run_tiles(const TilePlan& plan, int64_t M, int64_t N, int64_t K, Tile&& tile) {
  const int64_t tiles = plan.tiles_m * plan.tiles_n;
  const double tile_flops = 2.0 * double(plan.mb) * double(plan.nb) * double(K);
  const int64_t grain = std::max<int64_t>(1, int64_t(kMinTileFlops / tile_flops));
  parallel_for(tiles, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t i0 = (t % plan.tiles_m) * plan.mb, j0 = (t / plan.tiles_m) * plan.nb;
      tile(i0, std::min(M, i0 + plan.mb), j0, std::min(N, j0 + plan.nb));
    }
  });
}

void zero_or_keep(float* C, int64_t count, bool accumulate) {
  if (!accumulate) std::fill(C, C + count, 0.0f);
}

void check_args(const char* op, const QuantizedMatrix& W, const void* in, const void* out,
                int64_t in_count, int64_t out_count) {
  check_quantized(W, op);
  GLM4_CHECK(W.rows <= INT32_MAX && W.cols <= INT32_MAX, "[", op, "] size too large");
  GLM4_CHECK(in != nullptr || in_count == 0, "[", op, "] input is null");
  GLM4_CHECK(out != nullptr || out_count == 0, "[", op, "] output is null");
}

// Threads over the rows of W, each task at least kMinTaskBytes of codes.
template <typename Rows>
void parallel_over_rows(const QuantizedMatrix& W, Rows&& rows) {
  const int64_t row_bytes = std::max<int64_t>(1, int64_t(W.bytes()) / std::max<int64_t>(1, W.rows));
  parallel_for(W.rows, std::max<int64_t>(8, kMinTaskBytes / row_bytes), rows);
}

void decode_forward(const float* X, int64_t M, const QuantizedMatrix& W, float* Y,
                    bool accumulate) {
  const quant_detail::QuantKernels& k = quant_detail::active();
  std::vector<float> xp(size_t(M * W.cols));
  k.prepare_x(W.bits, X, M, W.cols, xp.data());
  const int64_t K = W.cols, N = W.rows;
  parallel_over_rows(W, [&](int64_t n0, int64_t n1) {
    for (int64_t m = 0; m < M; m += kDecodeMaxM)
      k.forward_rows(W, xp.data() + m * K, std::min(kDecodeMaxM, M - m), n0, n1, Y + m * N, N,
                     accumulate);
  });
}

// dX[m, c0:c1] (+)= sum_n dY[m, n] deq(W)[n, c0:c1], summed over n in order.
void decode_input_grad_stripe(const float* dY, int64_t M, const QuantizedMatrix& W, int64_t c0,
                              int64_t c1, float* dX, bool accumulate) {
  const quant_detail::QuantKernels& k = quant_detail::active();
  if (k.input_grad_stripe && k.input_grad_stripe(dY, M, W, c0, c1, dX, accumulate)) return;
  const int64_t width = c1 - c0, N = W.rows, K = W.cols;
  alignas(64) float acc[kDecodeMaxM][kPanel];
  alignas(64) float w[kPanel];
  for (int64_t m = 0; m < M; ++m) std::fill(acc[m], acc[m] + width, 0.0f);
  for (int64_t n = 0; n < N; ++n) {
    k.dequant_row(W, n, c0, width, w);
    for (int64_t m = 0; m < M; ++m) {
      const float d = dY[m * N + n];
      for (int64_t j = 0; j < width; ++j) acc[m][j] += d * w[j];
    }
  }
  for (int64_t m = 0; m < M; ++m) {
    float* dx = dX + m * K + c0;
    for (int64_t j = 0; j < width; ++j) dx[j] = accumulate ? dx[j] + acc[m][j] : acc[m][j];
  }
}

}  // namespace

void quant_linear_forward(const float* X, int64_t M, int64_t K, const QuantizedMatrix& W, float* Y,
                          bool accumulate) {
  const int64_t N = W.rows;
  check_args("quant_linear_forward", W, X, Y, M * K, M * N);
  GLM4_CHECK(M >= 0 && K == W.cols, "[quant_linear_forward] X [", M, ", ", K,
             "] does not match W [", W.rows, ", ", W.cols, "]");
  if (M == 0 || N == 0) return;
  if (K == 0) return zero_or_keep(Y, M * N, accumulate);
  if (M <= kStreamRows) return decode_forward(X, M, W, Y, accumulate);
  init_blas();
  const quant_detail::QuantKernels& k = quant_detail::active();
  const TilePlan plan = plan_tiles(M, N, 16);
  run_tiles(plan, M, N, K, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    thread_local std::vector<float> tile;  // W[j0:j1, k0:k1] dequantized
    for (int64_t k0 = 0; k0 < K; k0 += kReduceBlock) {
      const int64_t kw = std::min(kReduceBlock, K - k0);
      if (tile.size() < size_t((j1 - j0) * kw)) tile.resize(size_t((j1 - j0) * kw));
      for (int64_t j = j0; j < j1; ++j) k.dequant_row(W, j, k0, kw, tile.data() + (j - j0) * kw);
      const float beta = k0 > 0 || accumulate ? 1.0f : 0.0f;
      sgemm_tile(true, i1 - i0, j1 - j0, kw, X + i0 * K + k0, K, tile.data(), kw, beta,
                 Y + i0 * N + j0, N);
    }
  });
}

bool quant_int8_supported(const QuantizedMatrix& W) { return quant_detail::int8_supported(W.bits); }

bool quant_int8_available() { return quant_detail::int8_supported(4); }

bool quant_int8_decodes(int bits) { return quant_detail::int8_supported(bits); }

void quant_linear_forward_int8(const float* X, int64_t M, int64_t K, const QuantizedMatrix& W,
                               float* Y, bool accumulate) {
  const int64_t N = W.rows;
  check_args("quant_linear_forward_int8", W, X, Y, M * K, M * N);
  GLM4_CHECK(M >= 0 && K == W.cols, "[quant_linear_forward_int8] X [", M, ", ", K,
             "] does not match W [", W.rows, ", ", W.cols, "]");
  GLM4_CHECK(quant_int8_supported(W), "[quant_linear_forward_int8] needs AVX512-VNNI or AVX2, ",
             "and 4- or 8-bit codes (2, 3, 5 and 6 with AVX512-VBMI; ", W.bits, " bits)");
  if (M == 0 || N == 0) return;
  if (K == 0) return zero_or_keep(Y, M * N, accumulate);
  const bool decode = M <= kStreamRows;
  if (!decode && !quant_detail::int8_gemm_supported(W.bits))  // 2, 3, 5, 6 bits: decode only
    return quant_linear_forward(X, M, K, W, Y, accumulate);
  quant_detail::Int8DecodeInput in;
  if (!quant_detail::prepare_int8_decode_input(
          W, X, M, in,
          decode ? quant_detail::Int8Layout::kDecode : quant_detail::Int8Layout::kColumns))
    return quant_linear_forward(X, M, K, W, Y, accumulate);  // inf or NaN: let fp32 carry it
  if (!decode) {
    // The GEMM adds block by block; accumulating adds its finished product, as the decode does.
    std::vector<float> product(accumulate ? size_t(M * N) : 0);
    float* out = accumulate ? product.data() : Y;
    using quant_detail::kInt8GemmRows;
    parallel_for(ceil_div(N, kInt8GemmRows), 1, [&](int64_t t0, int64_t t1) {
      quant_detail::int8_gemm_rows(W, in, M, t0 * kInt8GemmRows, std::min(N, t1 * kInt8GemmRows),
                                   out, N);
    });
    if (accumulate)
      for (size_t i = 0; i < product.size(); ++i) Y[i] += product[i];
    return;
  }
  parallel_over_rows(W, [&](int64_t n0, int64_t n1) {
    for (int64_t m = 0; m < M; m += kDecodeMaxM)
      quant_detail::int8_decode_rows(W, in, m, std::min(kDecodeMaxM, M - m), n0, n1, Y + m * N, N,
                                     accumulate);
  });
}

void quant_linear_input_grad(const float* dY, int64_t M, int64_t N, const QuantizedMatrix& W,
                             float* dX, bool accumulate) {
  const int64_t K = W.cols;
  check_args("quant_linear_input_grad", W, dY, dX, M * N, M * K);
  GLM4_CHECK(M >= 0 && N == W.rows, "[quant_linear_input_grad] dY [", M, ", ", N,
             "] does not match W [", W.rows, ", ", W.cols, "]");
  if (M == 0 || K == 0) return;
  if (N == 0) return zero_or_keep(dX, M * K, accumulate);
  if (M <= kDecodeMaxM) {
    const int64_t stripes = ceil_div(K, kPanel);
    const int64_t stripe_bytes = std::max<int64_t>(1, int64_t(W.bytes()) * kPanel / K);
    parallel_for(stripes, std::max<int64_t>(1, kMinTaskBytes / stripe_bytes),
                 [&](int64_t s0, int64_t s1) {
                   for (int64_t s = s0; s < s1; ++s)
                     decode_input_grad_stripe(dY, M, W, s * kPanel, std::min(K, (s + 1) * kPanel),
                                              dX, accumulate);
                 });
    return;
  }
  init_blas();
  const quant_detail::QuantKernels& k = quant_detail::active();
  const TilePlan plan = plan_tiles(M, K, 128);  // column tiles stay aligned to every group size
  run_tiles(plan, M, K, N, [&](int64_t i0, int64_t i1, int64_t c0, int64_t c1) {
    if (k.input_grad_tile && M <= kTileKernelMaxRows)
      return k.input_grad_tile(dY, W, i0, i1, c0, c1, dX, accumulate);
    thread_local std::vector<float> tile;  // W[n0:n1, c0:c1] dequantized
    const int64_t width = c1 - c0;
    for (int64_t n0 = 0; n0 < N; n0 += kReduceBlock) {
      const int64_t nb = std::min(kReduceBlock, N - n0);
      if (tile.size() < size_t(nb * width)) tile.resize(size_t(nb * width));
      for (int64_t n = n0; n < n0 + nb; ++n)
        k.dequant_row(W, n, c0, width, tile.data() + (n - n0) * width);
      const float beta = n0 > 0 || accumulate ? 1.0f : 0.0f;
      sgemm_tile(false, i1 - i0, width, nb, dY + i0 * N + n0, N, tile.data(), width, beta,
                 dX + i0 * K + c0, K);
    }
  });
}

}  // namespace glm4
