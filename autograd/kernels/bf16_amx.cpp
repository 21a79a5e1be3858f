// The AMX panel product: 2 x 2 blocks of 16 x 16 fp32 accumulator tiles (tmm0-3) fed by two A
// tiles (tmm4-5) and two B tiles (tmm6-7) per 32-step k-block, one tdpbf16ps per tile pair.
// Every tile instruction is our own inline asm with a "memory" clobber: GCC 12's
// _tile_loadconfig declares only 8 of the 64 config bytes as read (so -O3 drops the stores of
// the rest and ldtilecfg faults) and its _tile_loadd declares no memory read at all.
#include <cstdint>

#include "autograd/kernels/bf16_internal.h"

namespace glm4::kernels::bf16 {

namespace {

// clang-format would split the "memory" clobber into two string literals.
// clang-format off
#define GLM4_TILE_LOAD(t, ptr, stride)                                                   \
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(ptr), "r"(int64_t(stride)) \
                   : "memory")
#define GLM4_TILE_STORE(t, ptr, stride)                                                   \
  __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(ptr), "r"(int64_t(stride)) \
                   : "memory")
// clang-format on
#define GLM4_TILE_ZERO(t) __asm__ volatile("tilezero %%tmm" #t ::)
// tmm<c> += tmm<a> (rows layout) . tmm<b> (pairs layout)
#define GLM4_TILE_DP(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Tiles 0-7 all 16 rows of 64 bytes.
constexpr TileConfig make_config() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = 16;
  }
  return c;
}
constexpr TileConfig kConfig = make_config();

// C tiles (i, j) for i < NA, j < NB over k-blocks [kb0, kb1).
template <int NA, int NB>
void block(const uint16_t* a, int64_t a_stride, const uint16_t* b, int64_t b_stride, int64_t kb0,
           int64_t kb1, float* c, int64_t ldc, bool accumulate) {
  const int64_t cs = ldc * int64_t(sizeof(float));
  float* c01 = c + 16;
  float* c10 = c + 16 * ldc;
  float* c11 = c10 + 16;
  if (accumulate) {
    GLM4_TILE_LOAD(0, c, cs);
    if constexpr (NB == 2) GLM4_TILE_LOAD(1, c01, cs);
    if constexpr (NA == 2) GLM4_TILE_LOAD(2, c10, cs);
    if constexpr (NA == 2 && NB == 2) GLM4_TILE_LOAD(3, c11, cs);
  } else {
    GLM4_TILE_ZERO(0);
    if constexpr (NB == 2) GLM4_TILE_ZERO(1);
    if constexpr (NA == 2) GLM4_TILE_ZERO(2);
    if constexpr (NA == 2 && NB == 2) GLM4_TILE_ZERO(3);
  }
  for (int64_t kb = kb0; kb < kb1; ++kb) {
    const uint16_t* a0 = a + kb * kBlockElems;
    const uint16_t* b0 = b + kb * kBlockElems;
    GLM4_TILE_LOAD(4, a0, 64);
    GLM4_TILE_LOAD(6, b0, 64);
    if constexpr (NB == 2) GLM4_TILE_LOAD(7, b0 + b_stride, 64);
    GLM4_TILE_DP(0, 4, 6);
    if constexpr (NB == 2) GLM4_TILE_DP(1, 4, 7);
    if constexpr (NA == 2) {
      GLM4_TILE_LOAD(5, a0 + a_stride, 64);
      GLM4_TILE_DP(2, 5, 6);
      if constexpr (NB == 2) GLM4_TILE_DP(3, 5, 7);
    }
  }
  GLM4_TILE_STORE(0, c, cs);
  if constexpr (NB == 2) GLM4_TILE_STORE(1, c01, cs);
  if constexpr (NA == 2) GLM4_TILE_STORE(2, c10, cs);
  if constexpr (NA == 2 && NB == 2) GLM4_TILE_STORE(3, c11, cs);
}

}  // namespace

void amx_begin() { __asm__ volatile("ldtilecfg %0" ::"m"(kConfig) : "memory"); }
void amx_end() { __asm__ volatile("tilerelease" ::: "memory"); }

void amx_panel(const PanelArgs& p) {
  for (int64_t i = 0; i < p.ga; i += 2)
    for (int64_t j = 0; j < p.gb; j += 2) {
      const uint16_t* a = p.a + i * p.a_stride;
      const uint16_t* b = p.b + j * p.b_stride;
      float* c = p.c + i * kGroup * p.ldc + j * kGroup;
      const bool two_a = i + 1 < p.ga, two_b = j + 1 < p.gb;
      if (two_a && two_b)
        block<2, 2>(a, p.a_stride, b, p.b_stride, p.kb0, p.kb1, c, p.ldc, p.accumulate);
      else if (two_a)
        block<2, 1>(a, p.a_stride, b, p.b_stride, p.kb0, p.kb1, c, p.ldc, p.accumulate);
      else if (two_b)
        block<1, 2>(a, p.a_stride, b, p.b_stride, p.kb0, p.kb1, c, p.ldc, p.accumulate);
      else
        block<1, 1>(a, p.a_stride, b, p.b_stride, p.kb0, p.kb1, c, p.ldc, p.accumulate);
    }
}

}  // namespace glm4::kernels::bf16
