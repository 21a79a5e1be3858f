// Decode-sized products (M <= kSmallM rows of X): bandwidth-bound kernels that read each weight
// element once, widening bf16 / f16 in registers. Every output element is summed in the same
// order whatever the weight dtype and the thread split, so a bf16 weight gives exactly the result
// of its widened f32 copy.
#include <algorithm>

#include "autograd/kernels/gemm_internal.h"
#include "autograd/kernels/simd.h"
#include "base/parallel.h"

namespace glm4::gemm_detail {

namespace {

using simd::VecF;
constexpr int64_t L = simd::kLanes;
constexpr int64_t kStripe = 256;            // dX columns per input-grad task
constexpr int64_t kMinTaskBytes = 1 << 16;  // weight bytes a task should read at least
// How far ahead of its loads a row is prefetched (into L2). A bf16 row's loads are 32 bytes a
// step, too slow a stream for the hardware prefetchers of an Intel Xeon guest: a mid-shape bf16
// decode ran 73-83 tokens/s (64% of the memory floor) without, 113-115 (86-91%) with 8-32 KB.
// On GLM-4-9B (8 KB rows, four at a time) 32 KB, one group of rows ahead, beat 16 KB by 6-16%
// in each of three alternated rounds; 64 KB did as well as 32.
constexpr int64_t kPrefetchBytes = 32768;

template <DType DT>
inline VecF load_w(const void* W, int64_t i) {
  if constexpr (DT == DType::F32)
    return simd::load(static_cast<const float*>(W) + i);
  else
    return simd::load(static_cast<const uint16_t*>(W) + i, DT);
}

template <DType DT>
inline float widen_w(const void* W, int64_t i) {
  if constexpr (DT == DType::F32)
    return static_cast<const float*>(W)[i];
  else
    return simd::widen(static_cast<const uint16_t*>(W) + i, DT);
}

// out[r * MX + m] = X[m, :] . W[n0 + r, :] for r < R, m < MX.
template <DType DT, int MX, int R>
inline void dot_rows(const float* X, int64_t K, const void* W, int64_t n0, float* out) {
  VecF acc[R][MX];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MX; ++m) acc[r][m] = simd::zero();
  const int64_t kv = K / L * L;
  for (int64_t k = 0; k < kv; k += L) {
    VecF x[MX];
    for (int m = 0; m < MX; ++m) x[m] = simd::load(X + m * K + k);
    for (int r = 0; r < R; ++r) {
      const int64_t at = (n0 + r) * K + k;
      __builtin_prefetch(
          static_cast<const char*>(W) + at * int64_t(dtype_size(DT)) + kPrefetchBytes, 0, 2);
      const VecF w = load_w<DT>(W, at);
      for (int m = 0; m < MX; ++m) acc[r][m] = simd::fma(w, x[m], acc[r][m]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int m = 0; m < MX; ++m) {
      float s = simd::hsum(acc[r][m]);
      for (int64_t k = kv; k < K; ++k) s += X[m * K + k] * widen_w<DT>(W, (n0 + r) * K + k);
      out[r * MX + m] = s;
    }
  }
}

template <DType DT, int MX>
void forward_rows(const float* X, int64_t K, const void* W, int64_t N, int64_t n0, int64_t n1,
                  float* Y, bool accumulate) {
  // W rows per pass: R * MX sums + MX inputs + 1 weight must fit the vector registers (32 with
  // AVX-512, 16 with AVX2).
  constexpr int R = MX <= 2 || L >= 16 ? 4 : 2;
  float out[R * MX];
  auto emit = [&](int64_t n, int rows) {
    for (int r = 0; r < rows; ++r)
      for (int m = 0; m < MX; ++m) {
        float& y = Y[m * N + n + r];
        y = accumulate ? y + out[r * MX + m] : out[r * MX + m];
      }
  };
  int64_t n = n0;
  for (; n + R <= n1; n += R) {
    dot_rows<DT, MX, R>(X, K, W, n, out);
    emit(n, R);
  }
  for (; n < n1; ++n) {
    dot_rows<DT, MX, 1>(X, K, W, n, out);
    emit(n, 1);
  }
}

// Rows [m0, m0 + MX) of X and Y.
template <DType DT, int MX>
void forward_rows_at(const float* X, int64_t m0, int64_t K, const void* W, int64_t N, int64_t n0,
                     int64_t n1, float* Y, bool accumulate) {
  forward_rows<DT, MX>(X + m0 * K, K, W, N, n0, n1, Y + m0 * N, accumulate);
}

// More than 4 rows (a batch of decode steps): each task takes its strip of W rows through the
// rows of X four at a time while the strip is in cache, so W still comes from memory once.
// Every output is summed exactly as with M <= 4: a row's result does not depend on M.
constexpr int64_t kStrip = 64;  // W rows per pass over the row groups of X

template <DType DT>
void forward_groups(const float* X, int64_t M, int64_t K, const void* W, int64_t N, int64_t n0,
                    int64_t n1, float* Y, bool accumulate) {
  for (int64_t s0 = n0; s0 < n1; s0 += kStrip) {
    const int64_t s1 = std::min(n1, s0 + kStrip);
    int64_t m0 = 0;
    for (; m0 + 4 <= M; m0 += 4) forward_rows_at<DT, 4>(X, m0, K, W, N, s0, s1, Y, accumulate);
    switch (M - m0) {
      case 1:
        forward_rows_at<DT, 1>(X, m0, K, W, N, s0, s1, Y, accumulate);
        break;
      case 2:
        forward_rows_at<DT, 2>(X, m0, K, W, N, s0, s1, Y, accumulate);
        break;
      case 3:
        forward_rows_at<DT, 3>(X, m0, K, W, N, s0, s1, Y, accumulate);
        break;
    }
  }
}

template <DType DT, int MX>
void forward(const float* X, int64_t K, const void* W, int64_t N, float* Y, bool accumulate) {
  const int64_t row_bytes = std::max<int64_t>(1, K * int64_t(dtype_size(DT)));
  const int64_t grain = std::max<int64_t>(8, kMinTaskBytes / row_bytes);
  parallel_for(N, grain, [&](int64_t n0, int64_t n1) {
    forward_rows<DT, MX>(X, K, W, N, n0, n1, Y, accumulate);
  });
}

// dX[m, k0:k1] (+)= sum_n dY[m, n] W[n, k0:k1], summed over n in order.
template <DType DT, int MX>
void grad_stripe(const float* dY, int64_t N, const void* W, int64_t K, int64_t k0, int64_t k1,
                 float* dX, bool accumulate) {
  alignas(64) float acc[MX][kStripe];
  const int64_t width = k1 - k0, wv = width / L * L;
  for (int m = 0; m < MX; ++m) std::fill(acc[m], acc[m] + width, 0.0f);
  int64_t n = 0;
  for (; n + 4 <= N; n += 4) {
    const int64_t base = n * K + k0;
    for (int64_t j = 0; j < wv; j += L) {
      const VecF w0 = load_w<DT>(W, base + j), w1 = load_w<DT>(W, base + K + j);
      const VecF w2 = load_w<DT>(W, base + 2 * K + j), w3 = load_w<DT>(W, base + 3 * K + j);
      for (int m = 0; m < MX; ++m) {
        const float* d = dY + m * N + n;
        VecF a = simd::load(acc[m] + j);
        a = simd::fma(simd::set1(d[0]), w0, a);
        a = simd::fma(simd::set1(d[1]), w1, a);
        a = simd::fma(simd::set1(d[2]), w2, a);
        a = simd::fma(simd::set1(d[3]), w3, a);
        simd::store(acc[m] + j, a);
      }
    }
    for (int64_t j = wv; j < width; ++j)
      for (int m = 0; m < MX; ++m)
        for (int i = 0; i < 4; ++i)
          acc[m][j] += dY[m * N + n + i] * widen_w<DT>(W, base + i * K + j);
  }
  for (; n < N; ++n) {
    const int64_t base = n * K + k0;
    for (int64_t j = 0; j < wv; j += L) {
      const VecF w = load_w<DT>(W, base + j);
      for (int m = 0; m < MX; ++m)
        simd::store(acc[m] + j, simd::fma(simd::set1(dY[m * N + n]), w, simd::load(acc[m] + j)));
    }
    for (int64_t j = wv; j < width; ++j)
      for (int m = 0; m < MX; ++m) acc[m][j] += dY[m * N + n] * widen_w<DT>(W, base + j);
  }
  for (int m = 0; m < MX; ++m) {
    float* dx = dX + m * K + k0;
    for (int64_t j = 0; j < width; ++j) dx[j] = accumulate ? dx[j] + acc[m][j] : acc[m][j];
  }
}

template <DType DT, int MX>
void input_grad(const float* dY, int64_t N, const void* W, int64_t K, float* dX, bool accumulate) {
  const int64_t stripes = (K + kStripe - 1) / kStripe;
  const int64_t stripe_bytes = std::max<int64_t>(1, N * kStripe * int64_t(dtype_size(DT)));
  const int64_t grain = std::max<int64_t>(1, kMinTaskBytes / stripe_bytes);
  parallel_for(stripes, grain, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s)
      grad_stripe<DT, MX>(dY, N, W, K, s * kStripe, std::min(K, (s + 1) * kStripe), dX, accumulate);
  });
}

template <DType DT>
void forward_dt(const float* X, int64_t M, int64_t K, const void* W, int64_t N, float* Y,
                bool acc) {
  switch (M) {
    case 1:
      return forward<DT, 1>(X, K, W, N, Y, acc);
    case 2:
      return forward<DT, 2>(X, K, W, N, Y, acc);
    case 3:
      return forward<DT, 3>(X, K, W, N, Y, acc);
    case 4:
      return forward<DT, 4>(X, K, W, N, Y, acc);
  }
  const int64_t row_bytes = std::max<int64_t>(1, K * int64_t(dtype_size(DT)));
  const int64_t grain = std::max<int64_t>(8, kMinTaskBytes / row_bytes);
  parallel_for(N, grain,
               [&](int64_t n0, int64_t n1) { forward_groups<DT>(X, M, K, W, N, n0, n1, Y, acc); });
}

template <DType DT>
void input_grad_dt(const float* dY, int64_t M, int64_t N, const void* W, int64_t K, float* dX,
                   bool acc) {
  switch (M) {
    case 1:
      return input_grad<DT, 1>(dY, N, W, K, dX, acc);
    case 2:
      return input_grad<DT, 2>(dY, N, W, K, dX, acc);
    case 3:
      return input_grad<DT, 3>(dY, N, W, K, dX, acc);
    case 4:
      return input_grad<DT, 4>(dY, N, W, K, dX, acc);
  }
}

}  // namespace

static_assert(kSmallM == 4, "small_m input-grad kernels are instantiated for M = 1..4");

void small_m_forward(const float* X, int64_t M, int64_t K, DType dtype, const void* W, int64_t N,
                     float* Y, bool accumulate) {
  if (M <= 0 || N <= 0) return;
  switch (dtype) {
    case DType::F32:
      return forward_dt<DType::F32>(X, M, K, W, N, Y, accumulate);
    case DType::BF16:
      return forward_dt<DType::BF16>(X, M, K, W, N, Y, accumulate);
    case DType::F16:
      return forward_dt<DType::F16>(X, M, K, W, N, Y, accumulate);
  }
}

void small_m_forward_rows(const float* X, int64_t M, int64_t K, DType dtype, const void* W,
                          int64_t N, int64_t n0, int64_t n1, float* Y, bool accumulate) {
  if (M <= 0 || n1 <= n0) return;
  switch (dtype) {
    case DType::F32:
      return forward_groups<DType::F32>(X, M, K, W, N, n0, n1, Y, accumulate);
    case DType::BF16:
      return forward_groups<DType::BF16>(X, M, K, W, N, n0, n1, Y, accumulate);
    case DType::F16:
      return forward_groups<DType::F16>(X, M, K, W, N, n0, n1, Y, accumulate);
  }
}

void small_m_input_grad(const float* dY, int64_t M, int64_t N, DType dtype, const void* W,
                        int64_t K, float* dX, bool accumulate) {
  if (M <= 0 || K <= 0) return;
  switch (dtype) {
    case DType::F32:
      return input_grad_dt<DType::F32>(dY, M, N, W, K, dX, accumulate);
    case DType::BF16:
      return input_grad_dt<DType::BF16>(dY, M, N, W, K, dX, accumulate);
    case DType::F16:
      return input_grad_dt<DType::F16>(dY, M, N, W, K, dX, accumulate);
  }
}

}  // namespace glm4::gemm_detail
