// What both int8 GEMMs share (quant_gemm_int8.cpp on AVX512-VNNI, quant_gemm_int8_avx2.cpp on
// AVX2): the tile of unpacked codes and the loop over tiles and rows of X. Include it only inside
// a `#pragma GCC target` region: the definitions have internal linkage, so each kernel file gets
// its own copy, compiled for its own instruction set.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "autograd/kernels/quant_gemm_int8.h"

namespace glm4::quant_detail {
namespace {

constexpr int64_t kTileRows = kInt8GemmRows;
constexpr int64_t kBlockCols = 512;  // columns a tile covers: 16 KB of unpacked codes, in L1
constexpr int64_t kChunkTiles = 8;   // tiles unpacked before the rows of X run over them

// One tile: W's rows [n, n + 32) over columns [k0, k0 + width), unpacked and interleaved.
// codes[(k / 4) * 128 + r * 4 + k % 4] is the code of row n + r, column k0 + k; rows past W's
// end are zero, with zero scales and biases, so they add nothing.
struct Tile {
  alignas(64) uint8_t codes[kBlockCols * kTileRows];
  alignas(64) float scales[kBlockCols / 32 * kTileRows];  // [group][32]; groups are >= 32 wide
  alignas(64) float biases[kBlockCols / 32 * kTileRows];
};

// Rows [n0, n1) of Y = X W^T: up to 8 tiles (256 rows of W) at a time, their codes for a block of
// columns unpacked once by fill(n, k0, width, tile) (128 KB, in L2), then run(tile, m, rows, n,
// k0, width, valid_rows, add) for each RowBlock rows of X (in L1) against each of them, adding to
// what earlier blocks of columns wrote. X's block is read once a chunk and the chunk's outputs
// stay in L2 across the blocks.
template <int RowBlock, class Fill, class Run>
void for_each_tile_block(const QuantizedMatrix& W, int64_t M, int64_t n0, int64_t n1,
                         const Fill& fill, const Run& run) {
  thread_local std::vector<Tile> tiles(kChunkTiles);
  const int64_t K = W.cols;
  for (int64_t chunk = n0; chunk < n1; chunk += kChunkTiles * kTileRows) {
    const int64_t chunk_end = std::min(n1, chunk + kChunkTiles * kTileRows);
    for (int64_t k0 = 0; k0 < K; k0 += kBlockCols) {
      const int64_t width = std::min(kBlockCols, K - k0);
      for (int64_t n = chunk, t = 0; n < chunk_end; n += kTileRows, ++t)
        fill(n, k0, width, tiles[size_t(t)]);
      for (int64_t m = 0; m < M; m += RowBlock)
        for (int64_t n = chunk, t = 0; n < chunk_end; n += kTileRows, ++t)
          run(tiles[size_t(t)], m, std::min<int64_t>(RowBlock, M - m), n, k0, width,
              std::min(kTileRows, chunk_end - n), k0 > 0);
    }
  }
}

}  // namespace
}  // namespace glm4::quant_detail
