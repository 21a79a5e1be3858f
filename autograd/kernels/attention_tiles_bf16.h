// The two tile products of attention_forward on the bf16 units (AMX tiles, else AVX512-BF16), for
// inference under --compute bf16: S = Q K^T and O += P V with Q (already scaled), K, P and V
// rounded to bf16 (nearest even) and fp32 sums; the online softmax around them stays fp32.
// K and V are packed once per (batch row, kv head) for every query head and tile that reads them.
#pragma once
#include <cstdint>
#include <vector>

#include "autograd/kernels/bf16_gemm.h"
#include "autograd/kernels/bf16_internal.h"

namespace glm4::kernels {

// The keys and values of one (batch row, kv head), packed for Bf16AttentionTiles: S keys of head
// size d read from rows `ld` floats apart. Key tiles must start at multiples of 64.
struct Bf16KeysValues {
  int64_t S = 0, d = 0;
  std::vector<uint16_t> k;  // K^T as the pairs layout's B: column groups of 16 keys
  std::vector<uint16_t> v;  // V as B: column groups of 16 of d, k-blocks of 32 keys
  void pack(const float* keys, const float* values, int64_t ld, int64_t S, int64_t d);
};

class Bf16AttentionTiles {
 public:
  // Up to 32 query rows and 64 keys a tile, head size d. Configures the tile registers of this
  // thread for its lifetime (one per task range). `kernel` is kAmx or kAvx512Bf16.
  Bf16AttentionTiles(Bf16Kernel kernel, int64_t d);
  ~Bf16AttentionTiles();
  Bf16AttentionTiles(const Bf16AttentionTiles&) = delete;
  Bf16AttentionTiles& operator=(const Bf16AttentionTiles&) = delete;

  void set_query(const float* q, int64_t tq);  // q [tq, d]
  // s[tq, tk] (row stride tk) = Q K^T for keys [k0, k0 + tk) of kv; k0 a multiple of 64.
  void scores(const Bf16KeysValues& kv, int64_t k0, int64_t tk, float* s);
  // acc[tq, d] += p V for p [tq, tk] (row stride tk) and keys [k0, k0 + tk) of kv; acc must
  // have room for 32 rows (whole groups of 16 are written).
  void accumulate(const float* p, const Bf16KeysValues& kv, int64_t k0, int64_t tk, float* acc);

 private:
  bf16::Isa isa_;
  int64_t d_, tq_ = 0;
  std::vector<uint16_t> q_, p_;  // packed operands (bf16_internal.h layouts)
  std::vector<float> c_;         // one padded product tile
};

}  // namespace glm4::kernels
