// The bf16 GEMM driver: picks the kernel, packs the activation once per call, cuts the output
// into (weight block x activation block) tasks on TBB, packs each task's weight panel into a
// thread-local buffer and runs the ISA's panel product over it. The blocking depends on the
// shapes only, and every output element is summed over the whole reduction by one task in
// k order, so results do not depend on the thread count.
#include "autograd/kernels/bf16_gemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "autograd/kernels/affine_quant.h"
#include "autograd/kernels/bf16_internal.h"
#include "autograd/kernels/convert.h"
#include "autograd/kernels/cpu_features.h"
#include "base/check.h"
#include "base/parallel.h"

namespace glm4::kernels {

namespace {

using namespace bf16;

constexpr int64_t kSmallGradM = 4;       // up to this many rows the input grad reads W directly
constexpr int64_t kPanelKb = 1024;       // weight panel per task, KB (half of L2)
constexpr int64_t kChunkKb = 128;        // activation chunk per pass, KB
constexpr int64_t kMaxWeightGroups = 8;  // 128 weight rows / columns per task at most
constexpr int64_t kMaxWideGroups = 16;   // 256 weight columns per task (input gradient)
constexpr int64_t kMaxActGroups = 32;    // 512 activation rows per task at most
constexpr int64_t kMaxKc = 64;           // k-blocks per pass (2048 reduction steps)
constexpr int64_t kMaxKs = 256;          // k-blocks per weight panel (8192 reduction steps)
constexpr int64_t kMinTasks = 8;         // enough tasks to balance a few threads
constexpr int64_t kMinTaskBytes = 1 << 16;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// A 64-byte aligned buffer that only grows.
template <typename T>
class AlignedBuffer {
 public:
  T* get(int64_t n) {
    if (n > size_) {
      const size_t bytes = (size_t(n) * sizeof(T) + 63) / 64 * 64;
      data_.reset(static_cast<T*>(std::aligned_alloc(64, bytes)));
      GLM4_CHECK(data_ != nullptr, "[bf16 gemm] out of memory for ", bytes, " bytes");
      size_ = n;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<T, FreeDeleter> data_;
  int64_t size_ = 0;
};

void no_op() {}

// Tasks: weight blocks of wg groups x activation blocks of ag groups, C held for the whole task.
// A task packs its weight panel for ks k-blocks of the reduction at a time (so the panel fits
// L2 whatever K is), then runs activation chunks of ac groups over that part in passes of kc
// k-blocks. Storing and reloading fp32 C between passes is exact, so the chunking changes no
// result; it depends on the shapes alone anyway.
struct Plan {
  int64_t wg, ag, ac, kc, ks;
  int64_t w_blocks, a_blocks;
};

// `wide`: the weight pack reads a strip of columns from every row (the input gradient), so
// wider strips over fewer rows per panel keep its reads sequential.
Plan plan(int64_t weight_groups, int64_t act_groups, int64_t kb, bool wide) {
  Plan p;
  p.kc = std::min(kb, kMaxKc);
  p.ks = std::min(kb, wide ? kMaxKc : kMaxKs);
  p.wg = std::min(std::clamp<int64_t>(kPanelKb / p.ks, 2, wide ? kMaxWideGroups : kMaxWeightGroups),
                  weight_groups);
  p.ag = std::min(act_groups, kMaxActGroups);
  auto blocks = [](int64_t n, int64_t b) { return (n + b - 1) / b; };
  while (blocks(weight_groups, p.wg) * blocks(act_groups, p.ag) < kMinTasks) {
    if (p.wg > 2)
      p.wg = (p.wg + 1) / 2;  // weight panels are cheaper to repeat than packs
    else if (p.ag > 2)
      p.ag = (p.ag + 1) / 2;
    else
      break;
  }
  p.w_blocks = blocks(weight_groups, p.wg);
  p.a_blocks = blocks(act_groups, p.ag);
  p.ac = std::min(std::max<int64_t>(kChunkKb / p.kc, 2), p.ag);
  return p;
}

// The task loop shared by both products. `act` is the packed activation (group stride kb
// blocks); pack_w(w0, wn, s0, s1, panel) packs weight groups [w0, w0 + wn) over k-blocks
// [s0, s1); store(w0, wn, a0, an, c, ldc) writes the task's C out. With weight_is_a, C is
// [weight rows][activation rows] (the forward's Y^T), else [activation rows][weight columns].
template <typename PackW, typename Store>
void run_tasks(const Isa& isa, const Plan& pl, bool weight_is_a, int64_t kb, int64_t wgroups,
               int64_t agroups, const uint16_t* act, PackW&& pack_w, Store&& store) {
  parallel_for(pl.w_blocks * pl.a_blocks, 1, [&](int64_t t0, int64_t t1) {
    thread_local AlignedBuffer<uint16_t> panel_buf;
    thread_local AlignedBuffer<float> c_buf;
    uint16_t* panel = panel_buf.get(pl.wg * pl.ks * kBlockElems);
    float* c = c_buf.get(pl.wg * pl.ag * kGroup * kGroup);
    const int64_t ldc = (weight_is_a ? pl.ag : pl.wg) * kGroup;
    const int64_t act_stride = kb * kBlockElems;
    isa.begin();
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t w0 = t / pl.a_blocks * pl.wg, wn = std::min(wgroups, w0 + pl.wg) - w0;
      const int64_t a0 = t % pl.a_blocks * pl.ag, an = std::min(agroups, a0 + pl.ag) - a0;
      for (int64_t s0 = 0; s0 < kb; s0 += pl.ks) {
        const int64_t s1 = std::min(kb, s0 + pl.ks), panel_stride = (s1 - s0) * kBlockElems;
        pack_w(w0, wn, s0, s1, panel);
        for (int64_t h = 0; h < an; h += pl.ac) {
          const int64_t hn = std::min(an, h + pl.ac) - h;
          const uint16_t* ap = act + (a0 + h) * act_stride + s0 * kBlockElems;
          for (int64_t k0 = s0; k0 < s1; k0 += pl.kc) {
            const int64_t k1 = std::min(s1, k0 + pl.kc);
            const bool more = k0 > 0;  // add to the passes before
            if (weight_is_a)
              isa.panel({panel, wn, panel_stride, ap, hn, act_stride, k0 - s0, k1 - s0,
                         c + h * kGroup, ldc, more});
            else
              isa.panel({ap, hn, act_stride, panel, wn, panel_stride, k0 - s0, k1 - s0,
                         c + h * kGroup * ldc, ldc, more});
          }
        }
      }
      store(w0, wn, a0, an, c, ldc);
    }
    isa.end();
  });
}

void check_args(const char* op, int64_t M, int64_t N, int64_t K, const void* act, int64_t act_count,
                const uint16_t* W, const float* out, int64_t out_count) {
  GLM4_CHECK(M >= 0 && N >= 0 && K >= 0, "[", op, "] negative size M=", M, " N=", N, " K=", K);
  GLM4_CHECK((act != nullptr || act_count == 0) && (W != nullptr || N * K == 0) &&
                 (out != nullptr || out_count == 0),
             "[", op, "] null pointer with M=", M, " N=", N, " K=", K);
}

// out[rows, cols] (+)= 0 when the reduction is empty.
void fill_empty(float* out, int64_t rows, int64_t cols, bool accumulate) {
  if (!accumulate) std::fill(out, out + rows * cols, 0.0f);
}

void small_forward(const float* X, int64_t M, int64_t K, const uint16_t* W, int64_t N, float* Y,
                   bool accumulate) {
  std::vector<uint16_t> xb(size_t(M * kblocks(K) * kKBlock));
  round_rows_bf16(X, M, K, xb.data());
  // Blocks of whole 16-row groups, about kMinTaskBytes of W each: a thread's run of blocks is one
  // stretch of W in address order, which its prefetches follow.
  const int64_t want = std::max<int64_t>(1, kMinTaskBytes / std::max<int64_t>(1, 2 * K));
  const int64_t rows = groups(want) * kGroup, blocks = (N + rows - 1) / rows;
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    avx512_small_forward(xb.data(), M, K, W, N, b0 * rows, std::min(N, b1 * rows), Y, accumulate);
  });
}

void small_input_grad(const float* dY, int64_t M, int64_t N, const uint16_t* W, int64_t K,
                      float* dX, bool accumulate) {
  const int64_t np = kblocks(N) * kKBlock;
  std::vector<uint16_t> dyb(size_t(M * np));
  round_rows_bf16(dY, M, N, dyb.data());
  const int64_t width = avx512_small_grad_stripe(M), stripes = (K + width - 1) / width;
  const int64_t grain = std::max<int64_t>(1, kMinTaskBytes / std::max<int64_t>(1, 2 * N * width));
  parallel_for(stripes, grain, [&](int64_t s0, int64_t s1) {
    avx512_small_input_grad(dyb.data(), M, N, W, K, s0, s1, dX, accumulate);
  });
}

}  // namespace

Isa bf16::isa_of(Bf16Kernel kernel, const char* op) {
  GLM4_CHECK(kernel != Bf16Kernel::kNone, "[", op, "] no bf16 kernel selected");
  GLM4_CHECK(bf16_kernel_available(kernel), "[", op, "] the ", bf16_kernel_name(kernel),
             " kernel is not available on this CPU");
  if (kernel == Bf16Kernel::kAmx) return {amx_panel, amx_begin, amx_end};
  return {avx512_panel, no_op, no_op};
}

bool bf16_kernel_available(Bf16Kernel kernel) {
  switch (kernel) {
    case Bf16Kernel::kNone:
      return true;
    case Bf16Kernel::kAvx512Bf16:
      return cpu_features().avx512_bf16;
    case Bf16Kernel::kAmx:
      return enable_amx();
  }
  return false;
}

namespace {

// The forward for any weight source: pack_w(r0, r1, k0, k1, panel) packs weight rows [r0, r1)
// over reduction [k0, k1) into the rows layout.
template <typename PackW>
void forward_tasks(const Isa& isa, const float* X, int64_t M, int64_t K, int64_t N, float* Y,
                   bool accumulate, PackW&& pack_w) {
  const int64_t kb = kblocks(K), mg = groups(M), ng = groups(N);
  AlignedBuffer<uint16_t> xb_buf;
  uint16_t* xb = xb_buf.get(mg * kb * kBlockElems);  // X as B: [mg][kb][16 pairs][16][2]
  parallel_for(mg, std::max<int64_t>(1, 64 / kb),
               [&](int64_t g0, int64_t g1) { pack_pairs_f32(X, M, K, K, g0, g1, kb, xb); });
  const Plan pl = plan(ng, mg, kb, /*wide=*/false);
  run_tasks(
      isa, pl, /*weight_is_a=*/true, kb, ng, mg, xb,
      [&](int64_t w0, int64_t wn, int64_t s0, int64_t s1, uint16_t* panel) {
        pack_w(w0 * kGroup, std::min(N, (w0 + wn) * kGroup), s0 * kKBlock,
               std::min(K, s1 * kKBlock), panel);
      },
      [&](int64_t w0, int64_t wn, int64_t a0, int64_t an, const float* c, int64_t ldc) {
        const int64_t n0 = w0 * kGroup, n1 = std::min(N, (w0 + wn) * kGroup);
        const int64_t m0 = a0 * kGroup, m1 = std::min(M, (a0 + an) * kGroup);
        store_transposed(c, ldc, n1 - n0, m1 - m0, Y + m0 * N + n0, N, accumulate);  // C = Y^T
      });
}

// The input gradient for any weight source: pack_w(n0, n1, c0, c1, panel) packs W's rows
// [n0, n1) (the reduction) and columns [c0, c1) into the pairs layout.
template <typename PackW>
void input_grad_tasks(const Isa& isa, const float* dY, int64_t M, int64_t N, int64_t K, float* dX,
                      bool accumulate, PackW&& pack_w) {
  const int64_t nkb = kblocks(N), mg = groups(M), kg = groups(K);
  AlignedBuffer<uint16_t> dy_buf;
  uint16_t* dyb = dy_buf.get(mg * nkb * kBlockElems);  // dY as A: [mg][nkb][16][32]
  parallel_for(mg, std::max<int64_t>(1, 64 / nkb),
               [&](int64_t g0, int64_t g1) { pack_rows_f32(dY, M, N, N, g0, g1, nkb, dyb); });
  const Plan pl = plan(kg, mg, nkb, /*wide=*/true);
  run_tasks(
      isa, pl, /*weight_is_a=*/false, nkb, kg, mg, dyb,
      [&](int64_t w0, int64_t wn, int64_t s0, int64_t s1, uint16_t* panel) {
        pack_w(s0 * kKBlock, std::min(N, s1 * kKBlock), w0 * kGroup,
               std::min(K, (w0 + wn) * kGroup), panel);
      },
      [&](int64_t w0, int64_t wn, int64_t a0, int64_t an, const float* c, int64_t ldc) {
        const int64_t c0 = w0 * kGroup, c1 = std::min(K, (w0 + wn) * kGroup);
        const int64_t m0 = a0 * kGroup, m1 = std::min(M, (a0 + an) * kGroup);
        for (int64_t m = m0; m < m1; ++m) {
          float* dx = dX + m * K + c0;
          const float* row = c + (m - m0) * ldc;
          if (accumulate)
            for (int64_t j = 0; j < c1 - c0; ++j) dx[j] += row[j];
          else
            std::memcpy(dx, row, size_t(c1 - c0) * sizeof(float));
        }
      });
}

// Thread-local scratch for a converted (dequantized or widened) weight panel: fp32 and its
// bf16 rounding.
struct QuantScratch {
  AlignedBuffer<float> f32;
  AlignedBuffer<uint16_t> bf16;
};
QuantScratch& quant_scratch() {
  thread_local QuantScratch s;
  return s;
}

const uint16_t* packed_of(const QuantizedMatrix& W) {  // for check_args' null checks only
  return reinterpret_cast<const uint16_t*>(W.packed);
}

}  // namespace

void bf16_linear_forward(Bf16Kernel kernel, const float* X, int64_t M, int64_t K, const uint16_t* W,
                         int64_t N, float* Y, bool accumulate) {
  check_args("bf16_linear_forward", M, N, K, X, M * K, W, Y, M * N);
  const Isa isa = isa_of(kernel, "bf16_linear_forward");
  if (M == 0 || N == 0) return;
  if (K == 0) return fill_empty(Y, M, N, accumulate);
  if (M <= kDecodeRows) return small_forward(X, M, K, W, N, Y, accumulate);
  forward_tasks(isa, X, M, K, N, Y, accumulate,
                [&](int64_t r0, int64_t r1, int64_t k0, int64_t k1, uint16_t* panel) {
                  pack_rows_bf16(W, K, r0, r1, k0, k1, panel);
                });
}

void bf16_linear_input_grad(Bf16Kernel kernel, const float* dY, int64_t M, int64_t N,
                            const uint16_t* W, int64_t K, float* dX, bool accumulate) {
  check_args("bf16_linear_input_grad", M, N, K, dY, M * N, W, dX, M * K);
  const Isa isa = isa_of(kernel, "bf16_linear_input_grad");
  if (M == 0 || K == 0) return;
  if (N == 0) return fill_empty(dX, M, K, accumulate);
  if (M <= kSmallGradM) return small_input_grad(dY, M, N, W, K, dX, accumulate);
  input_grad_tasks(isa, dY, M, N, K, dX, accumulate,
                   [&](int64_t n0, int64_t n1, int64_t c0, int64_t c1, uint16_t* panel) {
                     pack_pairs_bf16(W, K, n0, n1, c0, c1, panel);
                   });
}

namespace {
// Weight rows [r0, r1) x reduction [k0, k1) of a weight stored neither fp32 nor bf16, packed into
// the rows layout one group of 16 rows at a time: to_f32(first_row, rows, tile) writes the
// group's [rows, k1 - k0] values in fp32, which are then rounded to bf16.
template <typename ToF32>
void pack_rows_via_f32(int64_t r0, int64_t r1, int64_t k0, int64_t k1, uint16_t* panel,
                       ToF32&& to_f32) {
  const int64_t width = k1 - k0, kb = kblocks(width);
  float* tile = quant_scratch().f32.get(kGroup * width);
  for (int64_t g = 0; g < groups(r1 - r0); ++g) {
    const int64_t rows = std::min(kGroup, r1 - r0 - g * kGroup);
    to_f32(r0 + g * kGroup, rows, tile);
    pack_rows_f32(tile, rows, width, width, 0, 1, kb, panel + g * kb * kBlockElems);
  }
}
}  // namespace

void bf16_quant_linear_forward(Bf16Kernel kernel, const float* X, int64_t M, int64_t K,
                               const QuantizedMatrix& W, float* Y, bool accumulate) {
  check_quantized(W, "bf16_quant_linear_forward");
  const int64_t N = W.rows;
  GLM4_CHECK(K == W.cols, "[bf16_quant_linear_forward] X [", M, ", ", K, "] does not match W [",
             W.rows, ", ", W.cols, "]");
  check_args("bf16_quant_linear_forward", M, N, K, X, M * K, packed_of(W), Y, M * N);
  const Isa isa = isa_of(kernel, "bf16_quant_linear_forward");
  if (M == 0 || N == 0) return;
  if (K == 0) return fill_empty(Y, M, N, accumulate);
  // k0 is 0 or a multiple of 8192 (kMaxKs k-blocks) and k1 is that or K: whole groups.
  const bool direct = pack_quant_supported(W);
  forward_tasks(isa, X, M, K, N, Y, accumulate,
                [&](int64_t r0, int64_t r1, int64_t k0, int64_t k1, uint16_t* panel) {
                  if (direct) return pack_rows_quant(W, r0, r1, k0, k1, panel);
                  pack_rows_via_f32(r0, r1, k0, k1, panel,
                                    [&](int64_t r, int64_t rows, float* tile) {
                                      dequantize_tile_f32(W, r, rows, k0, k1 - k0, tile, k1 - k0);
                                    });
                });
}

void bf16_quant_linear_input_grad(Bf16Kernel kernel, const float* dY, int64_t M, int64_t N,
                                  const QuantizedMatrix& W, float* dX, bool accumulate) {
  check_quantized(W, "bf16_quant_linear_input_grad");
  const int64_t K = W.cols;
  GLM4_CHECK(N == W.rows, "[bf16_quant_linear_input_grad] dY [", M, ", ", N, "] does not match W [",
             W.rows, ", ", W.cols, "]");
  check_args("bf16_quant_linear_input_grad", M, N, K, dY, M * N, packed_of(W), dX, M * K);
  const Isa isa = isa_of(kernel, "bf16_quant_linear_input_grad");
  if (M == 0 || K == 0) return;
  if (N == 0) return fill_empty(dX, M, K, accumulate);
  const int64_t gs = W.group_size;
  const bool direct = pack_quant_supported(W);
  input_grad_tasks(isa, dY, M, N, K, dX, accumulate,
                   [&](int64_t n0, int64_t n1, int64_t c0, int64_t c1, uint16_t* panel) {
                     if (direct) return pack_pairs_quant(W, n0, n1, c0, c1, panel);
                     // Columns [c0, c1) widened to whole groups [g0, g1), dequantized, rounded.
                     const int64_t g0 = c0 / gs * gs, g1 = std::min(K, (c1 + gs - 1) / gs * gs);
                     const int64_t rows = n1 - n0, width = g1 - g0;
                     QuantScratch& s = quant_scratch();
                     float* tile = s.f32.get(rows * width);
                     uint16_t* tile16 = s.bf16.get(rows * width);
                     dequantize_tile_f32(W, n0, rows, g0, width, tile, width);
                     round_rows_bf16(tile, rows, width, tile16);  // width: whole k-blocks
                     pack_pairs_bf16(tile16 + (c0 - g0), width, 0, rows, 0, c1 - c0, panel);
                   });
}

void bf16_f16_linear_forward(Bf16Kernel kernel, const float* X, int64_t M, int64_t K,
                             const uint16_t* W, int64_t N, float* Y, bool accumulate) {
  check_args("bf16_f16_linear_forward", M, N, K, X, M * K, W, Y, M * N);
  const Isa isa = isa_of(kernel, "bf16_f16_linear_forward");
  if (M == 0 || N == 0) return;
  if (K == 0) return fill_empty(Y, M, N, accumulate);
  forward_tasks(isa, X, M, K, N, Y, accumulate,
                [&](int64_t r0, int64_t r1, int64_t k0, int64_t k1, uint16_t* panel) {
                  pack_rows_via_f32(
                      r0, r1, k0, k1, panel, [&](int64_t r, int64_t rows, float* tile) {
                        convert_block_to_f32(DType::F16, W + r * K + k0, K, rows, k1 - k0, tile);
                      });
                });
}

void bf16_f16_linear_input_grad(Bf16Kernel kernel, const float* dY, int64_t M, int64_t N,
                                const uint16_t* W, int64_t K, float* dX, bool accumulate) {
  check_args("bf16_f16_linear_input_grad", M, N, K, dY, M * N, W, dX, M * K);
  const Isa isa = isa_of(kernel, "bf16_f16_linear_input_grad");
  if (M == 0 || K == 0) return;
  if (N == 0) return fill_empty(dX, M, K, accumulate);
  input_grad_tasks(isa, dY, M, N, K, dX, accumulate,
                   [&](int64_t n0, int64_t n1, int64_t c0, int64_t c1, uint16_t* panel) {
                     const int64_t rows = n1 - n0, width = c1 - c0, ld = kblocks(width) * kKBlock;
                     QuantScratch& s = quant_scratch();
                     float* tile = s.f32.get(rows * width);
                     uint16_t* tile16 = s.bf16.get(rows * ld);
                     convert_block_to_f32(DType::F16, W + n0 * K + c0, K, rows, width, tile);
                     round_rows_bf16(tile, rows, width, tile16);  // rows of ld (whole k-blocks)
                     pack_pairs_bf16(tile16, ld, 0, rows, 0, width, panel);
                   });
}

}  // namespace glm4::kernels
