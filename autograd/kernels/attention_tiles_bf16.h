// The two tile products of attention_forward on the bf16 units (AMX tiles, else AVX512-BF16), for
// inference under --compute bf16: S = Q K^T and O += P V with Q (already scaled), K, P and V
// rounded to bf16 (nearest even) and fp32 sums; the online softmax around them stays fp32.
#pragma once
#include <cstdint>
#include <vector>

#include "autograd/kernels/bf16_gemm.h"

namespace glm4::kernels {

class Bf16AttentionTiles {
 public:
  // Up to 32 query rows and 64 keys a tile, head size d. Configures the tile registers of this
  // thread for its lifetime (one per task range). `kernel` is kAmx or kAvx512Bf16.
  Bf16AttentionTiles(Bf16Kernel kernel, int64_t d);
  ~Bf16AttentionTiles();
  Bf16AttentionTiles(const Bf16AttentionTiles&) = delete;
  Bf16AttentionTiles& operator=(const Bf16AttentionTiles&) = delete;

  void set_query(const float* q, int64_t tq);                           // q [tq, d]
  void scores(const float* k, int64_t tk, float* s);                    // s [tq, tk] = Q k^T
  // acc [tq, d] += p v; acc must have room for 32 rows (whole groups of 16 are written).
  void accumulate(const float* p, const float* v, int64_t tk, float* acc);

 private:
  Bf16Kernel kernel_;
  int64_t d_, tq_ = 0;
  std::vector<uint16_t> q_, k_, p_, v_rows_, v_;  // packed operands (bf16_internal.h layouts)
  std::vector<float> c_;                          // one padded S tile
};

}  // namespace glm4::kernels
