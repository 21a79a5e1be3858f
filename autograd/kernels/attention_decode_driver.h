// The part of the decode attention kernel (attention_decode.h) that does not depend on the
// instruction set, shared by attention_decode.cpp (AVX-512) and attention_decode_avx2.cpp: the
// online softmax over tiles of keys, the rows of the values' pass and the checked entry. `Isa`
// is a type of each file's anonymous namespace with kTile (keys a tile), scores<K>(q, rows, d, k,
// stride, tk, s) and value_rows<HB, K>(p, tk, v, stride, alpha, acc, dv), so every function here
// is instantiated with internal linkage in that file, as its kernels are inlined into it.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "autograd/kernels/attention_decode.h"
#include "autograd/kernels/vec_math.h"
#include "base/check.h"

namespace glm4::kernels::decode_driver {

template <class Isa, typename K>
void values(const float* p, int64_t rows, int64_t tk, const K* v, int64_t stride,
            const float* alpha, float* acc, int64_t dv) {
  constexpr int64_t kTile = Isa::kTile;
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4)
    Isa::template value_rows<4>(p + r * kTile, tk, v, stride, alpha + r, acc + r * dv, dv);
  for (; r + 2 <= rows; r += 2)
    Isa::template value_rows<2>(p + r * kTile, tk, v, stride, alpha + r, acc + r * dv, dv);
  for (; r < rows; ++r)
    Isa::template value_rows<1>(p + r * kTile, tk, v, stride, alpha + r, acc + r * dv, dv);
}

template <class Isa, typename K>
void decode_rows(const float* q, int64_t rows, const K* k, const K* v, int64_t stride, int64_t d,
                 int64_t dv, int64_t lo, int64_t hi, const DecodePart& out) {
  constexpr int64_t kTile = Isa::kTile;
  alignas(64) float s[kDecodeMaxRows * kTile];
  float alpha[kDecodeMaxRows];
  std::fill_n(out.acc, rows * dv, 0.0f);
  std::fill_n(out.m, rows, -INFINITY);
  std::fill_n(out.l, rows, 0.0f);
  for (int64_t k0 = lo; k0 < hi; k0 += kTile) {
    const int64_t tk = std::min(kTile, hi - k0);
    Isa::scores(q, rows, d, k + k0 * stride, stride, tk, s);
    for (int64_t r = 0; r < rows; ++r) {
      float* p = s + r * kTile;
      const float top = std::max(out.m[r], max_of(p, tk));
      alpha[r] = std::exp(out.m[r] - top);
      out.l[r] = out.l[r] * alpha[r] + float(exp_shifted(p, top, p, tk));
      out.m[r] = top;
    }
    values<Isa>(s, rows, tk, v + k0 * stride, stride, alpha, out.acc, dv);
  }
}

// attention_decode_rows: its arguments checked, fp32 or bf16 keys and values.
template <class Isa>
void run(const float* q, int64_t rows, const DecodeKeys& keys, int64_t lo, int64_t hi,
         const DecodePart& out) {
  GLM4_CHECK(rows >= 1 && rows <= kDecodeMaxRows && keys.d >= 1 && keys.dv >= 1 && lo < hi &&
                 (keys.k16 ? keys.v16 != nullptr : keys.k && keys.v),
             "[attention decode] ", rows, " rows of ", keys.d, ", values of ", keys.dv, ", keys [",
             lo, ", ", hi, ")");
  if (keys.k16)
    decode_rows<Isa>(q, rows, keys.k16, keys.v16, keys.stride, keys.d, keys.dv, lo, hi, out);
  else
    decode_rows<Isa>(q, rows, keys.k, keys.v, keys.stride, keys.d, keys.dv, lo, hi, out);
}

}  // namespace glm4::kernels::decode_driver
