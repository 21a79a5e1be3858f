// Internal to the bf16 kernels: the packed tile layouts both ISAs read, the packing routines
// and the per-ISA panel products. Only called after cpu_features() confirmed AVX512-BF16.
//
// A product C[R, Cn] = sum_k A[R, k] B[k, Cn] reads two packed operands, zero-padded to whole
// blocks of 16 rows / columns and 32 reduction steps (1 KB, one AMX tile each):
//   rows  layout (A): [R/16][K/32][16 rows][32 k]           element (r, k)
//   pairs layout (B): [Cn/16][K/32][16 k-pairs][16 cols][2] element (k, c) ("VNNI")
// The forward reads W as A (rows) and X as B (pairs), so C = Y^T; the input gradient reads dY
// as A and W as B, so C = dX.
#pragma once
#include <cstdint>

#include "autograd/kernels/bf16_gemm.h"

namespace glm4::kernels::bf16 {

constexpr int64_t kGroup = 16;        // rows / columns per block
constexpr int64_t kKBlock = 32;       // reduction steps per block
constexpr int64_t kBlockElems = 512;  // bf16 elements per block (1 KB)

inline int64_t groups(int64_t n) { return (n + kGroup - 1) / kGroup; }
inline int64_t kblocks(int64_t k) { return (k + kKBlock - 1) / kKBlock; }

// fp32 src[rows, k] (row stride ld) rounded to bf16 into the rows layout, for row groups
// [g0, g1) of a matrix with kb k-blocks.
void pack_rows_f32(const float* src, int64_t rows, int64_t k, int64_t ld, int64_t g0, int64_t g1,
                   int64_t kb, uint16_t* dst);
// fp32 src[cols, k] (row stride ld; column c of B is row c of src) rounded to bf16 into the
// pairs layout, column groups [g0, g1).
void pack_pairs_f32(const float* src, int64_t cols, int64_t k, int64_t ld, int64_t g0, int64_t g1,
                    int64_t kb, uint16_t* dst);
// bf16 W rows [r0, r1) x reduction [k0, k1) (row stride ld) into the rows layout (r0 and k0
// become 0). For the forward.
void pack_rows_bf16(const uint16_t* W, int64_t ld, int64_t r0, int64_t r1, int64_t k0, int64_t k1,
                    uint16_t* dst);
// bf16 W[n, c] as B[k = n, c]: reduction rows [n0, n1), columns [c0, c1) into the pairs layout.
// For the input gradient.
void pack_pairs_bf16(const uint16_t* W, int64_t ld, int64_t n0, int64_t n1, int64_t c0, int64_t c1,
                     uint16_t* dst);

// A 4- or 8-bit W packed from the bf16 rounding of dequantize_tile_f32's values, as the bf16
// packs above pack a bf16 W (whether W's width is one of these: pack_quant_supported):
// rows [r0, r1) x reduction [k0, k1) into the rows layout (k0, k1 multiples of 32), for the
// forward;
bool pack_quant_supported(const QuantizedMatrix& W);
void pack_rows_quant(const QuantizedMatrix& W, int64_t r0, int64_t r1, int64_t k0, int64_t k1,
                     uint16_t* dst);
// W[n, c] as B[k = n, c]: reduction rows [n0, n1), columns [c0, c1) (multiples of 16) into the
// pairs layout, for the input gradient.
void pack_pairs_quant(const QuantizedMatrix& W, int64_t n0, int64_t n1, int64_t c0, int64_t c1,
                      uint16_t* dst);

// C[16 ga, 16 gb] (+)= A B over k-blocks [kb0, kb1): A row group i starts at a + i * a_stride,
// B column group j at b + j * b_stride (elements; k-block kb at + kb * 512). C row-major fp32
// with row stride ldc; accumulate adds to C, else overwrites. Sums run over k in order.
struct PanelArgs {
  const uint16_t* a;
  int64_t ga, a_stride;
  const uint16_t* b;
  int64_t gb, b_stride;
  int64_t kb0, kb1;
  float* c;
  int64_t ldc;
  bool accumulate;
};
void amx_panel(const PanelArgs& p);
void avx512_panel(const PanelArgs& p);
// y[c, r] (+)= C[r, c] for r < rows, c < cols; C is padded to whole 16 x 16 tiles (row
// stride ldc), y has row stride ldy.
void store_transposed(const float* c, int64_t ldc, int64_t rows, int64_t cols, float* y,
                      int64_t ldy, bool accumulate);

// Tile registers are configured per thread: call before the first amx_panel of a task and
// release after the last.
void amx_begin();
void amx_end();

// One kernel's panel product with its per-thread set-up and release (amx_panel with amx_begin /
// amx_end, or avx512_panel with nothing).
struct Isa {
  void (*panel)(const PanelArgs&);
  void (*begin)();
  void (*end)();
};
// The Isa of `kernel`; throws naming `op` for kNone or a kernel this CPU cannot run (asking
// Linux for the AMX tile state on the way: bf16_kernel_available).
Isa isa_of(Bf16Kernel kernel, const char* op);

// Rows of X up to which the forward streams W once for all of them (avx512_small_forward)
// instead of packing panels: decode steps of up to 8 sequences (a serve batch).
constexpr int64_t kDecodeRows = 8;

// Decode-sized forward (M <= kDecodeRows), reading W once: Y[M, N] (+)= Xb[M, Kp] W[N, K]^T for
// rows [n0, n1) of W; Xb is X in bf16 with rows padded with zeros to Kp = 32 * kblocks(K). Each
// output is summed in an order fixed by K alone, so any split of [0, N) into row ranges, and any
// M, give the same bits for a row of Y.
void avx512_small_forward(const uint16_t* Xb, int64_t M, int64_t K, const uint16_t* W, int64_t N,
                          int64_t n0, int64_t n1, float* Y, bool accumulate);
// Decode-sized input gradient (M <= 4), reading W once: dX[M, K] (+)= dYb[M, Np] W[N, K] for
// the column stripes [s0, s1) of avx512_small_grad_stripe(M) columns each; dYb is dY in bf16
// with rows padded with zeros to Np = 32 * kblocks(N) (round_rows_bf16).
void avx512_small_input_grad(const uint16_t* dyb, int64_t M, int64_t N, const uint16_t* W,
                             int64_t K, int64_t s0, int64_t s1, float* dX, bool accumulate);
int64_t avx512_small_grad_stripe(int64_t M);
// fp32 X[M, K] rounded to bf16 into rows of Kp = 32 * kblocks(K) (zero padded).
void round_rows_bf16(const float* X, int64_t M, int64_t K, uint16_t* dst);

}  // namespace glm4::kernels::bf16
